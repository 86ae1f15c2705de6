-- A unique rule's new job. $1 id, $2 queue, $3 kind, $4 payload, $5
-- priority, $6 state, $7 max_attempts, $8 run_at, $9 trace, $10 now, $11
-- unique key, $12 timeout_ms, $13 key_slot (the nil slot when no live job
-- holds the key, else its own id: beside a running holder, as a retried
-- job), $14 wake-up channel. A plain enqueue that took the nil slot since
-- the holders were read wins: no row, and the caller decides again.
WITH ins AS (
    INSERT INTO {schema}.jobs AS j
        (id, queue, kind, payload, priority, state, max_attempts, run_at, trace, created_at, unique_key, timeout_ms,
         key_slot)
    VALUES ($1, $2, $3, $4::text, $5, $6, $7, $8, $9, $10, $11, $12, $13)
    ON CONFLICT DO NOTHING
    RETURNING j.state
),
notify AS (
    SELECT pg_notify($14, '') FROM ins WHERE ins.state = 'pending'
)
SELECT (SELECT count(*) FROM ins) AS inserted, (SELECT count(*) FROM notify) AS notified
