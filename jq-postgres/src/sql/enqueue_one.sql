-- Enqueue ONE job without a unique key: `enqueue.sql` with scalar binds.
--
-- $1 id uuid, $2 queue text, $3 kind text, $4 payload text, $5 priority int2,
-- $6 state text, $7 max_attempts int4, $8 run_at timestamptz,
-- $9 trace text (NULL allowed), $10 now timestamptz, $11 wake-up channel text,
-- $12 timeout in ms int8 (NULL allowed), $13 key text (NULL: none).
--
-- Same semantics as `enqueue.sql` (DO NOTHING on a stored id; one NOTIFY,
-- only when a Pending job was really inserted). It exists because
-- single-job enqueue is the common call and, from one client, is bound by
-- per-statement cost: a VALUES row plans and runs measurably cheaper than
-- `unnest` over eight one-element arrays (pgbench, one client).
WITH ins AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, state, max_attempts, run_at, trace, created_at, timeout_ms, key)
    VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::int2, $6::text, $7::int4, $8::timestamptz, $9::text,
            $10::timestamptz, $12::int8, $13::text)
    ON CONFLICT DO NOTHING
    RETURNING j.state
)
SELECT count(*) AS inserted,
       (SELECT count(*) FROM (
            SELECT pg_notify($11, '') FROM ins AS fresh WHERE fresh.state = 'pending' LIMIT 1) AS n) AS notified
FROM ins
