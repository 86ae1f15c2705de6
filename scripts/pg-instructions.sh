#!/usr/bin/env bash
# Counts the instructions a PostgreSQL backend executes to drain 20,000
# plain jobs with the claim and settle statements of given git revisions
# (scripts/pg_drain_replay.py: each revision's own schema, functions and SQL,
# claims of 120, one settle per claim, a commit after each). A scratch
# cluster is made with initdb; each replay runs in single-user mode under
# valgrind's callgrind, so the one backend that does the work is the one
# counted. Unlike the bench's jobs/s or pg_stat_statements' times, which
# spread by 20% between sittings, the count repeats to a few hundredths of
# a percent, so a schema or statement change shows at 1%.
#
#   bash scripts/pg-instructions.sh 4df32fb HEAD     # one replay of each, in instructions
#   JQ_RUNS=2 bash scripts/pg-instructions.sh HEAD   # two of each (alternating)
#   JQ_REPLAY_BATCH=64 bash scripts/pg-instructions.sh HEAD   # another claim size
#   JQ_REPLAY_KEYED=1 bash scripts/pg-instructions.sh HEAD WORKTREE   # the keyed drain
#   JQ_PLAN_CACHE_MODE=force_generic_plan ...   # plan as the storage's claim connections do
#
# WORKTREE stands for the files as they are in the checkout, uncommitted
# changes included. JQ_PLAN_CACHE_MODE (default auto) is the replay's
# plan_cache_mode: the storage's claim connections force generic plans
# (claim.rs), and a statement whose custom plans win under auto is
# re-planned at every call in the replay, never on those connections. JQ_REPLAY_KEYED=1 replays the bench's keyed drain
# instead (20,000 jobs over 10,000 keys, one Running per key, through
# claim_keyed.sql).
#
# Needs valgrind, python3 and PostgreSQL's server binaries (initdb,
# postgres: Debian's postgresql package). The scratch server listens on
# JQ_CG_PG_PORT (default 5440) only while the schemas are loaded. It leaves
# nothing behind unless JQ_KEEP=1 (then it names its directory, with the
# callgrind profiles).
set -euo pipefail
cd "$(dirname "$0")/.."

revs=("$@")
[ ${#revs[@]} -gt 0 ] || revs=(HEAD)
runs="${JQ_RUNS:-1}"
batch="${JQ_REPLAY_BATCH:-120}"
port="${JQ_CG_PG_PORT:-5440}"
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
for tool in valgrind python3 "$bin/initdb" "$bin/postgres" "$bin/pg_ctl" psql; do
  command -v "$tool" >/dev/null || { echo "pg-instructions: $tool is missing (apt-get install valgrind postgresql)" >&2; exit 1; }
done
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "pg-instructions: port $port is taken; set JQ_CG_PG_PORT to a free one" >&2
  exit 1
fi

scratch=$(mktemp -d /tmp/jq-pg-instructions.XXXXXX)
# PostgreSQL refuses to run as root: as root, the cluster is postgres's.
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown postgres "$scratch"
data="$scratch/data"
cleanup() {
  as_pg "$bin/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true
  if [ -n "${JQ_KEEP:-}" ]; then echo "pg-instructions: kept $scratch"; else rm -rf "$scratch"; fi
}
trap cleanup EXIT

as_pg "$bin/initdb" -D "$data" -A trust -U postgres >/dev/null
# Single-user mode reads one command per line; the procedures hold the rest.
single() { as_pg "$@" --single -D "$data" -c fsync=off -c autovacuum=off -c plan_cache_mode="${JQ_PLAN_CACHE_MODE:-auto}" postgres; }

as_pg "$bin/pg_ctl" -D "$data" -l "$scratch/server.log" -w \
  -o "-p $port -k $scratch -c listen_addresses=127.0.0.1 -c fsync=off -c autovacuum=off" start >/dev/null
for i in "${!revs[@]}"; do
  python3 scripts/pg_drain_replay.py "${revs[$i]}" "r$i" "$batch" ${JQ_REPLAY_KEYED:+keyed} > "$scratch/r$i.sql"
  if ! psql -h 127.0.0.1 -p "$port" -U postgres -q -v ON_ERROR_STOP=1 -f "$scratch/r$i.sql" postgres \
    >"$scratch/r$i.load" 2>&1; then
    echo "pg-instructions: ${revs[$i]}'s schema did not load:" >&2
    grep -i error "$scratch/r$i.load" >&2
    exit 1
  fi
done
as_pg "$bin/pg_ctl" -D "$data" -w stop >/dev/null

printf "%-14s %4s %16s %10s\n" "revision" "run" "instructions" "vs first"
for run in $(seq 1 "$runs"); do
  for i in "${!revs[@]}"; do
    if echo "CALL s_r$i.reset()" | single "$bin/postgres" 2>&1 | grep "ERROR" >&2; then
      echo "pg-instructions: ${revs[$i]}'s reset failed" >&2
      exit 1
    fi
    out="$scratch/cg.r$i.$run"
    log=$(echo "CALL s_r$i.drain()" | single valgrind --tool=callgrind --callgrind-out-file="$out" "$bin/postgres" 2>&1)
    if grep -q "ERROR" <<<"$log"; then
      echo "pg-instructions: ${revs[$i]}'s replay failed:" >&2
      grep "ERROR" <<<"$log" >&2
      exit 1
    fi
    total=$(grep -oE "Collected : [0-9]+" <<<"$log" | grep -oE "[0-9]+")
    [ "$i" -eq 0 ] && first=$total
    printf "%-14s %4s %16s %+9.2f%%\n" "$(git rev-parse --short "${revs[$i]}" 2>/dev/null || echo "${revs[$i]}")" "$run" "$total" \
      "$(awk -v a="$total" -v b="$first" 'BEGIN { print (a / b - 1) * 100 }')"
  done
done
