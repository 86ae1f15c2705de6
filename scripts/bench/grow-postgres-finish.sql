-- After grow-postgres.sql: {pending} Pending jobs in queue "backlog",
-- enqueued over the last hour (newer ids than every finished job), and
-- the counters of finished jobs (job_counts) for the rows
-- inserted behind jq's back. Run VACUUM ANALYZE on the jobs table after
-- it, as autovacuum would have by then.
INSERT INTO {schema}.jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at)
SELECT (lpad(to_hex((extract(epoch FROM t.at) * 1000)::int8), 12, '0') || '7' || substr(md5('p' || n), 1, 3) || '8'
        || substr(md5('p' || n), 4, 15))::uuid,
       'backlog', 'grown', '{"n":' || n || '}', 1, 'pending', 0, 25, t.at, t.at
FROM generate_series(1, {pending}) AS n,
     LATERAL (SELECT now() - interval '1 hour' + (n::float8 / {pending}) * interval '59 minutes') AS t(at);

INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
SELECT queue, state, 0, count(*)
FROM {schema}.jobs
WHERE state IN ('completed', 'dead', 'cancelled')
GROUP BY queue, state
ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
