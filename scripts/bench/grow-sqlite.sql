-- A store that grew for a year, for the bench's `grown` scenario
-- (examples/examples/bench/grown.rs), which runs this once per chunk of
-- finished jobs; by hand, on a jq database file:
--
--   sed -e 's/{first}/1/' -e 's/{last}/10000000/' -e 's/{total}/10000000/' \
--       -e "s/{now}/$(date +%s)000000/" scripts/bench/grow-sqlite.sql | sqlite3 jobs.db
--
-- then scripts/bench/grow-sqlite-finish.sql the same way.
--
-- Jobs {first} to {last} of {total} finished jobs, spread evenly over the
-- 365 days before {now} (µs since the epoch; the last one a minute
-- before), over four queues: 98 in 100 Completed, 1 Dead (with its error),
-- 1 Cancelled. Ids are UUID v7 of their creation instant (16-byte BLOBs),
-- as jq's clients make them, so they are in time order like a real
-- store's. One statement (a recursive CTE), no round trip per row;
-- grow-sqlite-finish.sql counts them.
WITH RECURSIVE n(i) AS (
    SELECT {first}
    UNION ALL
    SELECT i + 1 FROM n WHERE i < {last}
),
t(i, at) AS (
    SELECT i, {now} - 60000000 - CAST(({total} - i) * (31536000000000.0 / {total}) AS INTEGER) FROM n
)
INSERT INTO jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at,
                  finished_at, errors)
SELECT unhex(printf('%012x', at / 1000) || '7' || substr(hex(randomblob(2)), 1, 3) || '8'
             || substr(hex(randomblob(8)), 1, 15)),
       CASE i % 4 WHEN 0 THEN 'mail' WHEN 1 THEN 'reports' WHEN 2 THEN 'images' ELSE 'webhooks' END,
       'grown',
       '{"n":' || i || '}',
       1,
       CASE i % 100 WHEN 0 THEN 'dead' WHEN 1 THEN 'cancelled' ELSE 'completed' END,
       CASE i % 100 WHEN 1 THEN 0 ELSE 1 END,
       CASE i % 100 WHEN 0 THEN 1 ELSE 25 END,
       at,
       at,
       at + 20000,
       CASE i % 100 WHEN 0 THEN json_array(json_object('attempt', 1, 'at', at, 'message', 'boom')) ELSE '[]' END
FROM t;
