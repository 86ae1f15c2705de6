-- Stores one new job. ?1 id, ?2 queue, ?3 kind, ?4 payload, ?5 priority,
-- ?6 state, ?7 max_attempts, ?8 run_at, ?9 created_at (now), ?10 unique_key,
-- ?11 trace (the enqueuing span's W3C context), ?12 timeout_ms, ?13 key.
-- A keyed job waits with its marker set (keyed_wait, 001_schema.sql).
-- A job whose id is already stored (a client re-sending a batch) is left
-- alone: the caller sees 0 changes and returns the existing id.
INSERT INTO jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at, unique_key, trace,
                  timeout_ms, key, keyed_wait)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13)
ON CONFLICT (id) DO NOTHING
