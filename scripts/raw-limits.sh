#!/usr/bin/env bash
# Measures what the local PostgreSQL and Redis can do at all, with their own
# tools and no jq code, so the benchmark's figures can be compared with the
# raw limits of the same machine in the same sitting (see BENCHMARKS.md).
#
#   bash scripts/raw-limits.sh            # both servers
#   bash scripts/raw-limits.sh postgres   # or only one: postgres | redis | sqlite
#
# PostgreSQL (JQ_PG_HOST/JQ_PG_PORT/JQ_PG_USER, default 127.0.0.1:5432
# postgres): a scratch schema `jq_raw_limits` with jq's jobs table and
# indexes, dropped at the end.
#   - single-row INSERT commits/s from one client (pgbench, prepared): the
#     ceiling of jq's single enqueue;
#   - one INSERT of 20,000 rows from unnest arrays (server time), and a COPY
#     of the same rows: the ceiling of jq's batch enqueue;
#   - the drain's row writes as bare SQL (pgbench, 2 clients, batches of
#     256): claim then UPDATE to completed (jq's layout), the same in one
#     commit per batch, claim then DELETE (graphile-worker's layout), claim
#     then a DELETE that moves the row to a table of finished jobs (plain, or
#     partitioned by finished_at): layouts whose hot table holds only live
#     jobs, and
#     keyed rows, a head per key with no running row (drain_limits): the
#     floor under the keyed drain's ratio to the plain one;
#   - a limited slot's turn (limited_turns): one client finishes its one
#     running row and claims the next, again and again, with two commits a
#     turn (the ack, then the claim: jq's settle and claim) and with one;
#     what a limit of 1 allows at best: jobs of 2 ms reach at most
#     2 / (2 + turn ms) of a plain pool, which claims ahead and acks in the
#     background, while a limited slot must wait for the ack's commit;
#   - fdatasync calls/s of the data directory's disk (pg_test_fsync), when
#     run where the data directory is readable.
# SQLite (`cargo run --release -p jq-sqlite --example raw_commits`): a
# scratch file with jq's schema and the writer's settings (WAL,
# synchronous=NORMAL, a checkpoint every 8,192 pages), one connection on
# one thread.
#   - single-row INSERT commits/s of the enqueue statement, each in its own
#     BEGIN IMMEDIATE / COMMIT: the ceiling of jq's single enqueue.
# Redis (JQ_REDIS_HOST/JQ_REDIS_PORT, default 127.0.0.1:6379): keys under
# `jq_raw_limits:`, deleted at the end.
#   - unpipelined PING/s from one client: the floor under any awaited call;
#   - pipelined HSET/s creating new 9-field hashes (a hash per job, as a
#     development layout of jq stored jobs), ZADD/s into one sorted set: what a batch enqueue's
#     writes cost without Lua;
#   - server time of an empty EVALSHA;
#   - the drain's commands as plain pipelined commands, no Lua (20,000 jobs
#     in batches of 128, as the bench's drain claims), in three layouts (see
#     redis_drain_files; `keyed` as the bench's keyed drain keys them): ZPOPMIN; the reads and the write that lease the
#     batch; one ZADD into the lease set; the reads that check the leases
#     and the write that completes them; one ZREM and one ZADD into the
#     completed set. Server CPU per job
#     (`INFO cpu`) and the rate it allows: the floor under jq's Lua claim
#     and settlement, compared with `server_cost`'s drain pass.
set -euo pipefail
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"

which=${1:-all}
pg_host=${JQ_PG_HOST:-127.0.0.1}
pg_port=${JQ_PG_PORT:-5432}
pg_user=${JQ_PG_USER:-postgres}
redis_host=${JQ_REDIS_HOST:-127.0.0.1}
redis_port=${JQ_REDIS_PORT:-6379}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Fails with the package to install when a tool is missing.
need() { # package tool...
    local package=$1
    shift
    for tool in "$@"; do
        command -v "$tool" >/dev/null || {
            echo "raw-limits: $tool not found; install Debian's $package (apt-get install $package)" >&2
            exit 1
        }
    done
}

postgres_limits() {
    need postgresql-client psql pgbench
    local psql=(psql -h "$pg_host" -p "$pg_port" -U "$pg_user" -X -q -v ON_ERROR_STOP=1 postgres)
    echo "== PostgreSQL $("${psql[@]}" -Atc 'SHOW server_version') at $pg_host:$pg_port" \
        "(synchronous_commit=$("${psql[@]}" -Atc 'SHOW synchronous_commit'))"
    "${psql[@]}" <<'SQL'
DROP SCHEMA IF EXISTS jq_raw_limits CASCADE;
CREATE SCHEMA jq_raw_limits;
CREATE TABLE jq_raw_limits.jobs (
    id uuid PRIMARY KEY, queue text NOT NULL, kind text NOT NULL, payload text NOT NULL,
    priority smallint NOT NULL, state text NOT NULL, attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL, run_at timestamptz NOT NULL, created_at timestamptz NOT NULL,
    finished_at timestamptz, lease_token uuid, lease_worker text, lease_expires_at timestamptz,
    errors jsonb NOT NULL DEFAULT '[]', unique_key text,
    key_slot uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000', key text COLLATE "C");
CREATE INDEX jobs_claim ON jq_raw_limits.jobs (queue, priority DESC, run_at, id) INCLUDE (state)
    WHERE state IN ('pending', 'scheduled') AND key IS NULL;
CREATE INDEX jobs_keyed ON jq_raw_limits.jobs (queue, priority DESC, key, run_at, id) INCLUDE (state)
    WHERE key IS NOT NULL AND state IN ('pending', 'scheduled');
CREATE INDEX jobs_key_running ON jq_raw_limits.jobs (queue, key) WHERE key IS NOT NULL AND state = 'running';
CREATE INDEX jobs_scheduled ON jq_raw_limits.jobs (run_at) WHERE state = 'scheduled';
CREATE INDEX jobs_lease_expiry ON jq_raw_limits.jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE UNIQUE INDEX jobs_unique ON jq_raw_limits.jobs (queue, unique_key, key_slot)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running');
CREATE INDEX jobs_finished ON jq_raw_limits.jobs (state, finished_at) WHERE finished_at IS NOT NULL;
-- The layouts whose hot table holds only live jobs (drain_limits' move
-- variants): a finished job's row moves, in the statement that finishes
-- it, to a table of finished jobs, read by id (get) and by queue and
-- time (lists, retention). Plain, or partitioned by finished_at (retention
-- drops a partition instead of deleting rows).
CREATE TABLE jq_raw_limits.finished (LIKE jq_raw_limits.jobs);
ALTER TABLE jq_raw_limits.finished ADD PRIMARY KEY (id);
CREATE INDEX finished_listed ON jq_raw_limits.finished (queue, state, finished_at);
CREATE TABLE jq_raw_limits.finished_parts (LIKE jq_raw_limits.jobs) PARTITION BY RANGE (finished_at);
CREATE TABLE jq_raw_limits.finished_parts_old PARTITION OF jq_raw_limits.finished_parts
    FOR VALUES FROM (MINVALUE) TO (now() - interval '1 hour');
CREATE TABLE jq_raw_limits.finished_parts_now PARTITION OF jq_raw_limits.finished_parts
    FOR VALUES FROM (now() - interval '1 hour') TO (MAXVALUE);
CREATE INDEX finished_parts_id ON jq_raw_limits.finished_parts (id);
CREATE INDEX finished_parts_listed ON jq_raw_limits.finished_parts (queue, state, finished_at);
SQL
    cat >"$scratch/insert.sql" <<'SQL'
INSERT INTO jq_raw_limits.jobs (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at)
VALUES (gen_random_uuid(), 'bench', 'bench_noop', '{"n":1}', 0, 'pending', 25, now(), now());
SQL
    local tps
    tps=$(pgbench -h "$pg_host" -p "$pg_port" -U "$pg_user" -n -c 1 -T 5 -M prepared -f "$scratch/insert.sql" postgres 2>&1 |
        sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    printf '%-58s %12.0f /s\n' "single-row INSERT commits, 1 client (pgbench, 5 s)" "$tps"

    # 20,000 rows in one statement, 3 times each way. The INSERT reads
    # arrays built beforehand (as jq binds them) and is timed by the server
    # (EXPLAIN ANALYZE); the COPY is timed by psql (\timing), from a file.
    "${psql[@]}" -c "COPY (SELECT gen_random_uuid(), 'bench', 'bench_noop', '{\"n\":' || n || '}', 0, 'pending', 25,
                                  now(), now() FROM generate_series(1, 20000) AS n) TO STDOUT" >"$scratch/rows.copy"
    local timings
    timings=$(for _ in 1 2 3; do cat <<SQL
TRUNCATE jq_raw_limits.jobs;
CREATE TEMP TABLE IF NOT EXISTS arrays AS
SELECT array_agg(gen_random_uuid()) AS ids, array_agg('bench'::text) AS qs, array_agg('bench_noop'::text) AS ks,
       array_agg('{"n":' || n || '}') AS ps, array_agg(0::int2) AS prs, array_agg('pending'::text) AS sts,
       array_agg(25) AS mas, array_agg(now()) AS ras
FROM generate_series(1, 20000) AS n;
EXPLAIN (ANALYZE, COSTS OFF)
INSERT INTO jq_raw_limits.jobs (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at)
SELECT t.id, t.queue, t.kind, t.payload, t.priority, t.state, t.max_attempts, t.run_at, now()
FROM arrays AS a, unnest(a.ids, a.qs, a.ks, a.ps, a.prs, a.sts, a.mas, a.ras)
    AS t(id, queue, kind, payload, priority, state, max_attempts, run_at)
ON CONFLICT DO NOTHING;
TRUNCATE jq_raw_limits.jobs;
\\timing on
\\copy jq_raw_limits.jobs (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at) FROM '$scratch/rows.copy'
\\timing off
SQL
    done | "${psql[@]}" -At)
    median() { sort -g | sed -n 2p; }
    local insert_ms copy_ms
    insert_ms=$(sed -n 's/^Execution Time: \([0-9.]*\) ms$/\1/p' <<<"$timings" | median)
    copy_ms=$(sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$timings" | median)
    printf '%-58s %12.0f /s\n' "rows of one 20,000-row INSERT from unnest (server time)" \
        "$(awk -v ms="$insert_ms" 'BEGIN { print 20000 / (ms / 1000) }')"
    printf '%-58s %12.0f /s\n' "rows of one 20,000-row COPY (psql \\timing)" \
        "$(awk -v ms="$copy_ms" 'BEGIN { print 20000 / (ms / 1000) }')"
    drain_limits || echo "(drain rows: failed, see above)"
    limited_turns || echo "(limited turns: failed, see above)"
    "${psql[@]}" -c "DROP SCHEMA jq_raw_limits CASCADE"

    local data_dir
    data_dir=$("${psql[@]}" -Atc 'SHOW data_directory' 2>/dev/null || true)
    local fsync_tool
    fsync_tool=$(ls /usr/lib/postgresql/*/bin/pg_test_fsync 2>/dev/null | tail -1 || true)
    if [[ -n "$fsync_tool" && -n "$data_dir" && -w "$data_dir" ]]; then
        local ops
        "$fsync_tool" -s 2 -f "$data_dir/jq_raw_limits_fsync" >"$scratch/fsync.txt" 2>&1 || true
        ops=$(awk '/using one 8kB write/ { on = 1 } on && $1 == "fdatasync" { print $2; exit }' "$scratch/fsync.txt")
        rm -f "$data_dir/jq_raw_limits_fsync"
        printf '%-58s %12.0f /s\n' "fdatasync of one 8 kB WAL write (pg_test_fsync)" "$ops"
    else
        echo "(fdatasync rate skipped: run as a user who can write the data directory $data_dir)"
    fi
}

# The drain's row writes without jq: 2 pgbench clients (a pool's claimer and
# its settler run side by side; JQ_RAW_DRAIN_CLIENTS for more) each take
# 256 pending rows in claim order
# with FOR UPDATE SKIP LOCKED and mark them running with a lease, then finish
# them, until 153,600 rows are done. Three ways to finish, on the same table
# and indexes: jq's layout (an UPDATE to completed that keeps the row; two
# commits per batch), the same in one transaction per batch (one commit),
# a DELETE (graphile-worker's layout: the finished row goes, with no new
# version or index entry), and a DELETE whose RETURNING rows are inserted
# into a table of finished jobs in the same statement (plain, or partitioned
# by finished_at): what completing costs when the hot table keeps only live
# jobs and finished ones stay readable. Then the same with keyed rows (80,000 keys, two
# rows each, as the bench's keyed drain has two jobs a key): each claim
# takes the first row (its head) of the next 256 keys after its client's
# cursor that have no running row (jobs_keyed and jobs_key_running, jq's
# keyed indexes), locked one by one with SKIP LOCKED, and moves the
# cursor to the last key it took (back to the start when it took none);
# then the same UPDATE to completed. What any keyed claim with a limit
# per key adds to a plain one: a head per key, the keys' Running rows,
# an index entry per Running row. Needs the scratch schema.
drain_limits() {
    # The batch's own lease instant finds its rows through jobs_lease_expiry.
    local lease="timestamptz '2100-01-01' + :tok * interval '1 microsecond'"
    local claim="UPDATE jq_raw_limits.jobs AS j SET state = 'running', attempts = j.attempts + 1,
        lease_token = gen_random_uuid(), lease_worker = 'raw', lease_expires_at = $lease
    FROM (SELECT id FROM jq_raw_limits.jobs WHERE queue = 'bench' AND priority = 0 AND key IS NULL
          AND state IN ('pending', 'scheduled') ORDER BY run_at, id LIMIT 256 FOR UPDATE SKIP LOCKED) AS p
    WHERE j.id = p.id;"
    local complete="UPDATE jq_raw_limits.jobs SET state = 'completed', finished_at = now(), lease_token = NULL,
        lease_worker = NULL, lease_expires_at = NULL WHERE lease_expires_at = $lease;"
    local delete="DELETE FROM jq_raw_limits.jobs WHERE lease_expires_at = $lease;"
    # the finished rows move to a table of their own, in one statement
    local columns="id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at,
        finished_at, lease_token, lease_worker, lease_expires_at, errors, unique_key, key_slot, key"
    local moved="d.id, d.queue, d.kind, d.payload, d.priority, 'completed', d.attempts, d.max_attempts, d.run_at,
        d.created_at, now(), NULL, NULL, NULL, d.errors, d.unique_key, d.key_slot, d.key"
    local move="WITH d AS (DELETE FROM jq_raw_limits.jobs WHERE lease_expires_at = $lease RETURNING *)
        INSERT INTO jq_raw_limits.finished ($columns) SELECT $moved FROM d;"
    local move_part="WITH d AS (DELETE FROM jq_raw_limits.jobs WHERE lease_expires_at = $lease RETURNING *)
        INSERT INTO jq_raw_limits.finished_parts ($columns) SELECT $moved FROM d;"
    local set='\set tok random(1, 2000000000)'
    printf '%s\n%s\n%s\n' "$set" "$claim" "$complete" >"$scratch/drain-update.sql"
    printf '%s\nBEGIN;\n%s\n%s\nCOMMIT;\n' "$set" "$claim" "$complete" >"$scratch/drain-update-1tx.sql"
    printf '%s\n%s\n%s\n' "$set" "$claim" "$delete" >"$scratch/drain-delete.sql"
    printf '%s\n%s\n%s\n' "$set" "$claim" "$move" >"$scratch/drain-move.sql"
    printf '%s\n%s\n%s\n' "$set" "$claim" "$move_part" >"$scratch/drain-move-part.sql"
    # The keyed claim (see above); the cursor is the key's number, -1 at
    # the start (its key, "k000-1", sorts before every key).
    local cursor="'k' || lpad((:cursor)::text, 5, '0')"
    local keyed_claim="WITH u AS (UPDATE jq_raw_limits.jobs AS j SET state = 'running', attempts = j.attempts + 1,
        lease_token = gen_random_uuid(), lease_worker = 'raw', lease_expires_at = $lease
    FROM (SELECT t.ctid FROM (SELECT DISTINCT ON (r.key) r.key, r.ctid
                              FROM (SELECT jk.key, jk.run_at, jk.id, jk.ctid FROM jq_raw_limits.jobs AS jk
                                    WHERE jk.queue = 'bench' AND jk.priority = 0 AND jk.key IS NOT NULL
                                      AND jk.state IN ('pending', 'scheduled') AND jk.key > $cursor
                                    ORDER BY jk.priority DESC, jk.key, jk.run_at, jk.id LIMIT 1024) AS r
                              ORDER BY r.key, r.run_at, r.id) AS h
          CROSS JOIN LATERAL (SELECT x.ctid FROM jq_raw_limits.jobs AS x
                              WHERE x.ctid = h.ctid AND x.state IN ('pending', 'scheduled')
                              FOR UPDATE SKIP LOCKED) AS t
          WHERE h.key NOT IN (SELECT rr.key FROM jq_raw_limits.jobs AS rr
                              WHERE rr.queue = 'bench' AND rr.key IS NOT NULL AND rr.state = 'running')
          LIMIT 256) AS p
    WHERE j.ctid = p.ctid RETURNING j.key)
SELECT coalesce(max(substr(u.key, 2)::int), -1) AS cursor FROM u"
    printf '%s\n%s\n\\gset\n%s\n' "$set" "$keyed_claim" "$complete" >"$scratch/drain-keyed.sql"
    local variant label tps left clients=${JQ_RAW_DRAIN_CLIENTS:-2} # 1, 2, 3, 4, 5, 6 or 8: 600 batches in all
    for variant in "update:drain rows: claim, UPDATE to completed (jq's layout)" \
        "update-1tx:drain rows: the same, one commit per batch" \
        "delete:drain rows: claim, DELETE (graphile-worker's layout)" \
        "move:drain rows: claim, DELETE moving the row to finished" \
        "move-part:drain rows: the same, finished partitioned by time" \
        "keyed:drain rows: keyed, a head per key, UPDATE to completed"; do
        label=${variant#*:}
        variant=${variant%%:*}
        local key=NULL
        [[ "$variant" == keyed ]] && key="'k' || lpad(((n - 1) % 80000)::text, 5, '0')"
        "${psql[@]}" -c "TRUNCATE jq_raw_limits.jobs, jq_raw_limits.finished, jq_raw_limits.finished_parts" \
            -c "INSERT INTO jq_raw_limits.jobs
            (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at, key)
            SELECT gen_random_uuid(), 'bench', 'bench_noop', '{\"n\":' || n || '}', 0, 'pending', 25,
                   now() - interval '1 hour' + n * interval '1 microsecond', now(), $key
            FROM generate_series(1, 160000) AS n" -c "VACUUM ANALYZE jq_raw_limits.jobs" -c "CHECKPOINT"
        tps=$(pgbench -h "$pg_host" -p "$pg_port" -U "$pg_user" -n -c "$clients" -t $((600 / clients)) \
            -D cursor=-1 -f "$scratch/drain-$variant.sql" postgres 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        left=$("${psql[@]}" -Atc "SELECT count(*) FROM jq_raw_limits.jobs WHERE state = 'pending'")
        # a keyed claim that wraps around takes fewer than 256 rows: the
        # rate is of the rows done
        [[ "$left" == 6400 || "$variant" == keyed ]] || echo "($label: $left rows left pending, not 6,400: the figure is off)"
        [[ "$variant" == keyed ]] && echo "  (keyed: $((160000 - left)) rows done, $left left pending)"
        printf '%-58s %12.0f /s\n' "$label" "$(awk -v t="$tps" -v done=$((160000 - left)) 'BEGIN { print t * done / 600 }')"
    done
}

# A limited slot's turn without jq (see the top): rows in claim order, one
# client; each turn completes the row it holds (found by its lease instant
# through jobs_lease_expiry) and claims the next one after the last it took
# (the cursor, so no claim walks the index entries of rows already done),
# for 5 s. The two-commit turn is jq's: its settle and its claim are calls
# of their own. Needs the scratch schema.
limited_turns() {
    local lease="timestamptz '2100-01-01'"
    local ack="UPDATE jq_raw_limits.jobs SET state = 'completed', finished_at = now(), lease_token = NULL,
        lease_worker = NULL, lease_expires_at = NULL WHERE lease_expires_at = $lease;"
    local claim="UPDATE jq_raw_limits.jobs AS j SET state = 'running', attempts = j.attempts + 1,
        lease_token = gen_random_uuid(), lease_worker = 'raw', lease_expires_at = $lease
    FROM (SELECT id FROM jq_raw_limits.jobs WHERE queue = 'bench' AND priority = 0 AND key IS NULL
          AND state IN ('pending', 'scheduled') AND run_at > timestamptz '2000-01-01' + :cursor * interval '1 microsecond'
          ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) AS p
    WHERE j.id = p.id
    RETURNING (extract(epoch FROM j.run_at - timestamptz '2000-01-01') * 1000000)::bigint AS cursor"
    printf '%s\n%s\n\\gset\n' "$ack" "$claim" >"$scratch/turn-2.sql"
    printf 'BEGIN;\n%s\n%s\n\\gset\nCOMMIT;\n' "$ack" "$claim" >"$scratch/turn-1.sql"
    local commits tps ms
    for commits in 2 1; do
        "${psql[@]}" -c "TRUNCATE jq_raw_limits.jobs, jq_raw_limits.finished, jq_raw_limits.finished_parts" \
            -c "INSERT INTO jq_raw_limits.jobs
            (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at)
            SELECT gen_random_uuid(), 'bench', 'bench_noop', '{\"n\":' || n || '}', 0, 'pending', 25,
                   timestamptz '2000-01-01' + n * interval '1 microsecond', now()
            FROM generate_series(1, 100000) AS n" -c "VACUUM ANALYZE jq_raw_limits.jobs" -c "CHECKPOINT"
        tps=$(pgbench -h "$pg_host" -p "$pg_port" -U "$pg_user" -n -c 1 -T 5 -M prepared -D cursor=0 \
            -f "$scratch/turn-$commits.sql" postgres 2>&1 | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        ms=$(awk -v t="$tps" 'BEGIN { print 1000 / t }')
        printf '%-58s %12.0f /s\n' "limited turns: ack then claim, $commits commit(s) a turn" "$tps"
        printf '%-58s %11.0f %%\n' "  a limit of 1 on jobs of 2 ms at most (2 / (2 + $(printf '%.2f' "$ms") ms))" \
            "$(awk -v ms="$ms" 'BEGIN { print 100 * 2 / (2 + ms) }')"
    done
}

sqlite_limits() {
    need cargo cargo
    local root
    root="$(cd "$(dirname "$0")/.." && pwd)"
    echo "== SQLite (the library jq links, through rusqlite)"
    (cd "$root" && cargo run --quiet --release -p jq-sqlite --example raw_commits)
}

redis_limits() {
    need redis-tools redis-cli redis-benchmark
    local cli=(redis-cli -h "$redis_host" -p "$redis_port")
    local bench=(redis-benchmark -h "$redis_host" -p "$redis_port" -q -c 1)
    echo "== Redis $("${cli[@]}" info server | sed -n 's/^redis_version:\(.*\)\r$/\1/p') at $redis_host:$redis_port"
    rps() { tr '\r' '\n' | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1; }
    printf '%-58s %12.0f /s\n' "PING, 1 client, unpipelined" "$("${bench[@]}" -n 50000 ping 2>&1 | rps)"
    printf '%-58s %12.0f /s\n' "HSET of a new 9-field hash, pipelined 1,000" "$("${bench[@]}" -n 200000 -P 1000 -r 100000000 \
        hset 'jq_raw_limits:job:__rand_int__' id 0123456789abcdef0123456789abcdef queue bench kind bench_noop \
        payload '{"n":12345}' priority 1 state pending max_attempts 25 run_at 1763793000000000 \
        created_at 1763793000000000 2>&1 | rps)"
    printf '%-58s %12.0f /s\n' "ZADD into one sorted set, pipelined 1,000" "$("${bench[@]}" -n 200000 -P 1000 -r 100000000 \
        zadd 'jq_raw_limits:ready' 0 '0000000001763793000__rand_int__0123456789abcdef' 2>&1 | rps)"
    local sha
    sha=$("${cli[@]}" script load "return 1")
    # calls and usec of EVALSHA so far (a delta: other clients' stats stay as they are)
    evalsha_stats() {
        "${cli[@]}" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2/p'
    }
    local before after
    before=$(evalsha_stats)
    "${bench[@]}" -n 100000 -P 100 evalsha "$sha" 0 >/dev/null 2>&1
    after=$(evalsha_stats)
    printf '%-58s %12s us\n' "server time of an empty EVALSHA" \
        "$(awk -v b="${before:-0 0}" -v a="$after" 'BEGIN { split(b, x, " "); split(a, y, " ");
            printf "%.2f", (y[2] - x[2]) / (y[1] - x[1]) }')"
    "${cli[@]}" --scan --pattern 'jq_raw_limits:*' | xargs -r -n 1000 "${cli[@]}" unlink >/dev/null
    redis_raw_drain hash
    redis_raw_drain columns
    redis_raw_drain keyed
}

# The RESP encoding of one command per input line (arguments separated by
# single spaces, none empty or holding a space), for `redis-cli --pipe`.
resp() {
    awk '{ printf "*%d\r\n", NF; for (i = 1; i <= NF; i++) printf "$%d\r\n%s\r\n", length($i), $i }'
}

# The drain's commands without Lua (see the header), in one of two layouts:
#   hash     a hash per job (a development layout of jq), the lease and the
#            outcome written into it, commands per job;
#   columns  jq's key layout in outline: one hash per queue for the jobs'
#            bodies and one for their state (attempts, lease, outcome packed
#            in one value), so a few commands per batch.
#   keyed    columns, the jobs keyed as the bench's keyed drain keys them
#            (10,000 keys, two jobs each, one Running per key): no ready
#            set; the claim reads a page of the queue's keyed index
#            (`kwait`, members priority, key, separator, run_at, id) from
#            its cursor, two members per job in the first lap and one in
#            the second, removes what it takes, marks the keys Running and
#            moves the cursor; the ack clears the marks. The least any
#            keyed claim with a limit per key must do beyond a plain one:
#            find the next key's head and count the key's Running jobs.
# Writes the loading commands of redis_raw_drain (load.resp) and the
# drain's (drain.resp), in RESP, into directory `dir`.
redis_drain_files() { # layout dir
    local layout=$1 dir=$2
    local jobs=20000 batch=128 base='jq_raw_limits:{jq_raw_limits:bench}:'
    if [ "$layout" = keyed ]; then
        redis_keyed_drain_files "$dir"
        return
    fi
    awk -v n=$jobs -v b="$base" -v layout="$layout" 'BEGIN { for (i = 0; i < n; i++) {
        id = sprintf("%032x", i); run = 1763793000000000 + i
        if (layout == "hash") {
            printf "HSET %sjob:%s id %s queue bench kind bench_noop payload {\"n\":%d} priority 0 state pending max_attempts 25 run_at %d created_at %d\n", b, id, id, i, run, run
        } else {
            printf "HSET %sbody %s bench_noop|{\"n\":%d}|0|25|%d\n", b, id, i, run
            printf "HSET %sstate %s pending|0|%d\n", b, id, run
        }
        printf "ZADD %sready 0 %020d%s\n", b, run, id } }' | resp >"$dir/load.resp"
    # A claim's leases go in backwards, as claim.lua adds them.
    awk -v n=$jobs -v k=$batch -v b="$base" -v layout="$layout" 'BEGIN {
        tok = "0f0e0d0c-0b0a-4908-8706-050403020100"; ex = 1763793030000000; now = 1763793000500000
        for (s = 0; s < n; s += k) {
            e = (s + k < n) ? s + k : n
            printf "ZPOPMIN %sready %d\n", b, k
            if (layout == "hash") {
                for (i = s; i < e; i++) printf "HGETALL %sjob:%032x\n", b, i
                for (i = s; i < e; i++) printf "HSET %sjob:%032x state running attempts 1 lease_token %s lease_worker raw lease_expires_at %d\n", b, i, tok, ex
            } else {
                printf "HMGET %sbody", b; for (i = s; i < e; i++) printf " %032x", i; printf "\n"
                printf "HMGET %sstate", b; for (i = s; i < e; i++) printf " %032x", i; printf "\n"
                printf "HSET %sstate", b; for (i = s; i < e; i++) printf " %032x running|1|%d|%s|raw", i, ex, tok; printf "\n"
            }
            printf "ZADD %sleases", b; for (i = e - 1; i >= s; i--) printf " %d %032x", ex, i; printf "\n"
            if (layout == "hash") {
                for (i = s; i < e; i++) printf "HMGET %sjob:%032x state lease_token unique_key\n", b, i
                for (i = s; i < e; i++) printf "HSET %sjob:%032x state completed finished_at %d\n", b, i, now
            } else {
                printf "HMGET %sstate", b; for (i = s; i < e; i++) printf " %032x", i; printf "\n"
                printf "HSET %sstate", b; for (i = s; i < e; i++) printf " %032x completed|1|%d", i, now; printf "\n"
            }
            printf "ZREM %sleases", b; for (i = s; i < e; i++) printf " %032x", i; printf "\n"
            printf "ZADD %sdone:completed", b; for (i = s; i < e; i++) printf " %d %032x", now, i; printf "\n" } }' |
        resp >"$dir/drain.resp"
}

# The keyed layout of redis_drain_files. Job i's key is k<i mod 10,000>
# (zero-padded, so that the index's order is the keys' numeric order); "|"
# stands for the NUL that separates a member's key from its run_at.
redis_keyed_drain_files() { # dir
    local dir=$1
    local jobs=20000 keys=10000 batch=128 base='jq_raw_limits:{jq_raw_limits:bench}:'
    awk -v n=$jobs -v m=$keys -v b="$base" 'BEGIN { for (i = 0; i < n; i++) {
        id = sprintf("%032x", i); run = 1763793000000000 + i
        printf "HSET %sbody %s bench_noop|{\"n\":%d}|0|25|%d\n", b, id, i, run
        printf "HSET %sstate %s pending|0|%d|k%05d\n", b, id, run, i % m
        printf "ZADD %skwait 0 00000000000k%05d|%020d%s\n", b, i % m, run, id }
        printf "SET %skpending %d\n", b, n }' | resp >"$dir/load.resp"
    awk -v n=$jobs -v m=$keys -v k=$batch -v b="$base" 'BEGIN {
        tok = "0f0e0d0c-0b0a-4908-8706-050403020100"; ex = 1763793030000000; now = 1763793000500000
        for (s = 0; s < n; s += k) {
            e = (s + k < n) ? s + k : n
            # the page: from the first key taken, two members a key while
            # its second job waits too (first lap), one after
            if (s < m && e > m) {
                printf "ZRANGEBYLEX %skwait [00000000000k%05d + LIMIT 0 %d\n", b, s, 2 * (m - s)
                printf "ZRANGEBYLEX %skwait - + LIMIT 0 %d\n", b, e - m
            } else {
                printf "ZRANGEBYLEX %skwait [00000000000k%05d + LIMIT 0 %d\n", b, s % m, (s < m ? 2 : 1) * (e - s)
            }
            printf "HGETALL %skrun\n", b
            printf "ZREM %skwait", b; for (i = s; i < e; i++) printf " 00000000000k%05d|%020d%032x", i % m, 1763793000000000 + i, i; printf "\n"
            printf "HSET %skrun", b; for (i = s; i < e; i++) printf " k%05d 1", i % m; printf "\n"
            printf "DECRBY %skpending %d\n", b, e - s
            printf "HSET %scursors bench k%05d\n", b, (e - 1) % m
            printf "HMGET %sbody", b; for (i = s; i < e; i++) printf " %032x", i; printf "\n"
            printf "HMGET %sstate", b; for (i = s; i < e; i++) printf " %032x", i; printf "\n"
            printf "HSET %sstate", b; for (i = s; i < e; i++) printf " %032x running|1|%d|%s|raw|k%05d", i, ex, tok, i % m; printf "\n"
            printf "ZADD %sleases", b; for (i = e - 1; i >= s; i--) printf " %d %032x||k%05d", ex, i, i % m; printf "\n"
            printf "HMGET %sstate", b; for (i = s; i < e; i++) printf " %032x", i; printf "\n"
            printf "HSET %sstate", b; for (i = s; i < e; i++) printf " %032x completed|1|%d", i, now; printf "\n"
            printf "ZREM %sleases", b; for (i = s; i < e; i++) printf " %032x||k%05d", i, i % m; printf "\n"
            printf "HDEL %skrun", b; for (i = s; i < e; i++) printf " k%05d", i % m; printf "\n"
            printf "ZADD %sdone:completed", b; for (i = s; i < e; i++) printf " %d %032x", now, i; printf "\n" } }' |
        resp >"$dir/drain.resp"
}

redis_raw_drain() { # layout
    local layout=$1
    local cli=(redis-cli -h "$redis_host" -p "$redis_port")
    local jobs=20000
    redis_drain_files "$layout" "$scratch"
    "${cli[@]}" --pipe <"$scratch/load.resp" >/dev/null
    cpu() { "${cli[@]}" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }
    # name calls usec of every command so far
    cmdstats() {
        "${cli[@]}" info commandstats | tr -d '\r' |
            sed -n 's/^cmdstat_\([a-z|]*\):calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2 \3/p'
    }
    local c0 c1 t0 t1
    cmdstats >"$scratch/stats0"
    c0=$(cpu)
    t0=$(date +%s.%N)
    "${cli[@]}" --pipe <"$scratch/drain.resp" >/dev/null
    t1=$(date +%s.%N)
    c1=$(cpu)
    cmdstats >"$scratch/stats1"
    awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v n=$jobs -v layout="$layout" 'BEGIN {
        us = (c1 - c0) * 1e6 / n
        printf "%-58s %12.2f us\n", "drain commands without Lua (" layout " layout), server CPU/job", us
        printf "%-58s %12.0f /s\n", "  the rate that allows (server-bound)", 1e6 / us
        printf "%-58s %12.0f /s\n", "  measured through redis-cli --pipe", n / (t1 - t0) }'
    # what each command took (commandstats: execution only, not the I/O)
    awk -v n=$jobs 'NR == FNR { calls[$1] = $2; usec[$1] = $3; next }
        $1 != "info" && $1 != "echo" && $2 > calls[$1] { printf "  %-56s %12.2f us\n", $1 " per job", ($3 - usec[$1]) / n }' \
        "$scratch/stats0" "$scratch/stats1"
    "${cli[@]}" --scan --pattern 'jq_raw_limits:*' | xargs -r -n 1000 "${cli[@]}" unlink >/dev/null
}

case "$which" in
    all) postgres_limits; redis_limits; sqlite_limits ;;
    postgres) postgres_limits ;;
    redis) redis_limits ;;
    sqlite) sqlite_limits ;;
    # for scripts/redis-instructions.sh: only write the raw drain's commands
    drain-files) redis_drain_files "${2:?layout: hash, columns or keyed}" "${3:?directory}" ;;
    *) echo "usage: $0 [all|postgres|redis|sqlite]" >&2; exit 2 ;;
esac
