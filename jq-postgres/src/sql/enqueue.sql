-- Enqueue a batch without unique keys in ONE statement (so it works on any
-- executor, the caller's transaction included, and costs one round trip).
--
-- $1 ids uuid[], $2 queues text[], $3 kinds text[], $4 payloads text[],
-- $5 priorities int2[], $6 states text[], $7 max_attempts int4[],
-- $8 run_ats timestamptz[], $9 traces text[] (NULL elements allowed),
-- $10 now timestamptz, $11 wake-up channel text, $12 timeouts in ms int8[]
-- (NULL elements allowed), $13 keys text[] (NULL elements allowed: jobs
-- without a key).
--
-- An id already stored (a client resending after a lost answer) is skipped by
-- DO NOTHING, also when a concurrent transaction inserted it: every job of the
-- batch then resolves to its own id, and nothing is stored twice. No unique
-- key is set in this batch, so only the primary key can conflict.
--
-- The NOTIFY is sent once per statement, only when a Pending job was really
-- inserted; PostgreSQL delivers it when the enclosing transaction commits.
-- Returns one row: how many jobs were inserted.
WITH ins AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, state, max_attempts, run_at, trace, created_at, timeout_ms, key)
    SELECT t.id, t.queue, t.kind, t.payload, t.priority, t.state, t.max_attempts, t.run_at, t.trace, $10,
           t.timeout_ms, t.key
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::text[], $7::int4[],
                $8::timestamptz[], $9::text[], $12::int8[], $13::text[])
        AS t(id, queue, kind, payload, priority, state, max_attempts, run_at, trace, timeout_ms, key)
    ON CONFLICT DO NOTHING
    RETURNING j.state
)
SELECT count(*) AS inserted,
       (SELECT count(*) FROM (
            SELECT pg_notify($11, '') FROM ins AS fresh WHERE fresh.state = 'pending' LIMIT 1) AS n) AS notified
FROM ins
