#!/usr/bin/env bash
# Counts the instructions a Redis server executes per enqueued and per
# drained job: a scratch redis-server runs under valgrind's callgrind,
# `server_cost --drain N --gate` enqueues 20,000 jobs (JQ_JOBS) into it in
# batches of 1,000, claims (N per claim) and acknowledges them, then
# enqueues 5,000 more (JQ_SINGLES) one call each, as the bench's single
# enqueue; instrumentation is switched on only around those three passes,
# each counted on its own.
# Unlike the server's CPU time, the count repeats from one sitting to the
# next and whatever else the machine runs (a few tenths of a percent apart),
# so two builds can be compared on different days (BENCHMARKS.md).
#
#   bash scripts/redis-instructions.sh           # claims of 128, as the bench's drain
#   bash scripts/redis-instructions.sh 16        # or another claim size
#   JQ_TOP=25 bash scripts/redis-instructions.sh # also the 25 costliest functions
#   JQ_JOBS=400 bash scripts/redis-instructions.sh # a small queue (default 20,000 jobs)
#   JQ_SINGLES=0 bash scripts/redis-instructions.sh # no single enqueues (default 5,000)
#   JQ_FANIN=1 JQ_JOBS=10000 bash scripts/redis-instructions.sh # the jobs are one fan-in's members
#                                                   # (and its callback), as the bench's fanin
#   JQ_KEYED=1 bash scripts/redis-instructions.sh  # keyed as the bench's keyed drain (10,000 keys,
#                                                   # one Running job per key)
#   bash scripts/redis-instructions.sh raw columns  # the floor: raw-limits.sh's drain commands
#                                                   # without Lua, jq's layout in outline (or hash: a hash per job;
#                                                   # keyed: the keyed drain's, the floor under its ratio)
#
# Needs valgrind and the redis-server binary (both from Debian's packages).
# The scratch server listens on JQ_CG_PORT (default 6390), keeps nothing on
# disk and is shut down at the end; its profile is left in a temporary
# directory that the script names.
set -euo pipefail

batch="${1:-128}"
layout="${2:-columns}"
port="${JQ_CG_PORT:-6390}"
top="${JQ_TOP:-0}"
jobs="${JQ_JOBS:-20000}"
singles="${JQ_SINGLES:-5000}"
fanin=""
[ -n "${JQ_FANIN:-}" ] && fanin="--fanin"
[ -n "${JQ_KEYED:-}" ] && fanin="--keyed"

for tool in valgrind callgrind_control redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "redis-instructions: $tool is missing (apt-get install valgrind redis-server)" >&2; exit 1; }
done
if redis-cli -p "$port" ping >/dev/null 2>&1; then
  echo "redis-instructions: port $port is taken; set JQ_CG_PORT to a free one" >&2
  exit 1
fi

cd "$(dirname "$0")/.."
[ "$batch" = raw ] || cargo build --release -q -p jq-redis --example server_cost
dir="$(mktemp -d /tmp/jq-redis-instructions.XXXXXX)"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/callgrind.out" \
  redis-server --port "$port" --save '' --appendonly no >"$dir/valgrind.log" 2>&1 &
vg=$!
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; wait "$vg" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.2
done

total() { awk '/^totals:/ { print $2; exit }' "$1"; }

if [ "$batch" = raw ]; then
  bash scripts/raw-limits.sh drain-files "$layout" "$dir"
  redis-cli -p "$port" --pipe <"$dir/load.resp" >/dev/null
  callgrind_control -i on "$vg" >/dev/null 2>&1
  redis-cli -p "$port" --pipe <"$dir/drain.resp" >/dev/null
  callgrind_control -i off "$vg" >/dev/null 2>&1
  callgrind_control -d "$vg" >/dev/null 2>&1
  drain="$(total "$dir/callgrind.out.1")"
  echo "redis-server instructions per job, 20000 jobs (raw-limits.sh writes that many): the drain's commands without Lua ($layout layout, batches of 128) $((drain / 20000))"
  echo "profile: $dir/callgrind.out.1"
  exit 0
fi

coproc COST { JQ_REDIS_URL="redis://127.0.0.1:$port" "${CARGO_TARGET_DIR:-target}/release/examples/server_cost" --drain "$batch" --jobs "$jobs" --singles "$singles" --gate $fanin; }
# bash forgets a coproc's pid and descriptors once it exits: keep copies.
cost_pid=$COST_PID
exec {cost_out}<&"${COST[0]}" {cost_in}>&"${COST[1]}"

# Waits for server_cost to print the line `$1` (its timings, slowed by
# valgrind, mean nothing here).
until_mark() {
  local line
  while read -r line <&"$cost_out"; do
    [ "$line" = "$1" ] && return 0
  done
  echo "redis-instructions: server_cost ended before printing $1" >&2
  exit 1
}

# A dump writes what was counted since the last one, then starts from zero:
# part 1 is the batch enqueue, part 2 the drain, part 3 the single enqueues.
until_mark ready
callgrind_control -i on "$vg" >/dev/null 2>&1
echo go >&"$cost_in"
until_mark enqueued
callgrind_control -d "$vg" >/dev/null 2>&1
echo go >&"$cost_in"
until_mark drained
callgrind_control -i off "$vg" >/dev/null 2>&1
callgrind_control -d "$vg" >/dev/null 2>&1
echo go >&"$cost_in"
if [ "$singles" -gt 0 ]; then
  until_mark singles
  callgrind_control -i on "$vg" >/dev/null 2>&1
  echo go >&"$cost_in"
fi
until_mark done
if [ "$singles" -gt 0 ]; then
  callgrind_control -i off "$vg" >/dev/null 2>&1
  callgrind_control -d "$vg" >/dev/null 2>&1
fi
cat <&"$cost_out" >/dev/null
wait "$cost_pid" 2>/dev/null || true

enqueue="$(total "$dir/callgrind.out.1")"
drain="$(total "$dir/callgrind.out.2")"
echo "redis-server instructions per job, $jobs jobs${fanin:+ ($fanin)}: enqueue (batches of 1,000) $((enqueue / jobs)), drain ($batch per claim, claim and ack) $((drain / jobs))"
if [ "$singles" -gt 0 ]; then
  single="$(total "$dir/callgrind.out.3")"
  echo "redis-server instructions per single enqueue, $singles calls of 1 job into the drained queue: $((single / singles))"
fi
if [ "$top" -gt 0 ]; then
  echo "the drain's costliest functions, instructions of their own:"
  callgrind_annotate "$dir/callgrind.out.2" 2>/dev/null | grep -E '^ *[0-9,]+ ' | sed -n "2,$((top + 1))p" | sed 's/ (.*%)//'
fi
echo "profile: $dir/callgrind.out.2 (drain), .1 (batch enqueue)${single:+, .3 (single enqueues)}"
