-- Enqueue a batch in ONE statement (so it works on any executor, the caller's
-- transaction included, and costs one round trip).
--
-- $1 ids uuid[], $2 queues text[], $3 kinds text[], $4 payloads text[],
-- $5 priorities int2[], $6 states text[], $7 max_attempts int4[],
-- $8 run_ats timestamptz[], $9 unique_keys text[] (NULL elements allowed),
-- $10 now timestamptz, $11 wake-up channel text.
--
-- Uniqueness: the partial unique index jobs_unique is the arbiter. A job whose
-- key is live already takes the no-op DO UPDATE branch, which locks the
-- existing row and RETURNs it (even when it committed after this statement's
-- snapshot), so the caller gets the existing id. The batch is deduplicated on
-- the client first (DO UPDATE cannot touch a row twice in one statement).
--
-- The NOTIFY is sent once per statement, only when a Pending job was really
-- inserted; PostgreSQL delivers it when the enclosing transaction commits.
WITH ins AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, state, max_attempts, run_at, created_at, unique_key)
    SELECT t.id, t.queue, t.kind, t.payload, t.priority, t.state, t.max_attempts, t.run_at, $10, t.unique_key
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::text[], $7::int4[],
                $8::timestamptz[], $9::text[])
        AS t(id, queue, kind, payload, priority, state, max_attempts, run_at, unique_key)
    ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running')
    DO UPDATE SET unique_key = EXCLUDED.unique_key
    RETURNING j.id, j.queue, j.unique_key, j.state
)
SELECT ins.id, ins.queue, ins.unique_key,
       (SELECT count(*) FROM (
            SELECT pg_notify($11, '') FROM ins AS fresh
            WHERE fresh.state = 'pending' AND fresh.id = ANY($1::uuid[]) LIMIT 1) AS n) AS notified
FROM ins
