-- After grow-sqlite.sql: {pending} Pending jobs in queue "backlog",
-- enqueued over the hour before {now} (newer ids than every finished job),
-- and the counters of finished jobs (job_counts) for the
-- rows inserted behind jq's back.
WITH RECURSIVE n(i) AS (
    SELECT 1
    UNION ALL
    SELECT i + 1 FROM n WHERE i < {pending}
),
t(i, at) AS (
    SELECT i, {now} - 3600000000 + CAST(i * (3540000000.0 / {pending}) AS INTEGER) FROM n
)
INSERT INTO jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at)
SELECT unhex(printf('%012x', at / 1000) || '7' || substr(hex(randomblob(2)), 1, 3) || '8'
             || substr(hex(randomblob(8)), 1, 15)),
       'backlog', 'grown', '{"n":' || i || '}', 1, 'pending', 0, 25, at, at
FROM t;

INSERT INTO job_counts (queue, state, n)
SELECT queue, state, count(*) FROM jobs
WHERE state = 'completed' OR state = 'dead' OR state = 'cancelled'
GROUP BY queue, state
ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n;
