-- Running jobs whose lease expired (lease_expires_at <= ?1, now) record a
-- "lease expired" error and go back to Pending, or to Dead when no attempt
-- is left; one holding a cancel request goes to Cancelled, with no error. One statement: the guard is evaluated atomically with the write,
-- so a job a concurrent ack just completed is never touched. A keyed job
-- back to Pending gets its marker (keyed_wait, 001_schema.sql).
--
-- Only rows this statement can update without failing: an error history
-- that is not a JSON array, or attempt counts that are not integers, would
-- fail the whole statement (and every later recover) or be passed on as
-- garbage. recover_corrupt.sql finds those rows once this has run, and
-- they go to Dead with the reason (bury.sql). CASE, not AND: SQLite may
-- evaluate both sides of an AND, and json_type of text that is not JSON is
-- an error.
UPDATE jobs
SET errors = CASE WHEN cancel_requested_at IS NOT NULL THEN errors
        ELSE json_insert(errors, '$[#]', json_object('attempt', attempts, 'at', ?1, 'message',
        'lease expired (worker ' || coalesce(lease_worker, '') || ' did not finish or heartbeat in time)')) END,
    state = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
        WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
    finished_at = CASE WHEN cancel_requested_at IS NOT NULL OR attempts >= max_attempts THEN ?1 ELSE NULL END,
    run_at = CASE WHEN cancel_requested_at IS NOT NULL OR attempts >= max_attempts THEN run_at ELSE ?1 END,
    keyed_wait = CASE WHEN cancel_requested_at IS NOT NULL OR attempts >= max_attempts THEN NULL ELSE key END,
    lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL
WHERE state = 'running' AND lease_expires_at <= ?1
  AND typeof(attempts) = 'integer' AND typeof(max_attempts) = 'integer'
  AND CASE WHEN json_valid(errors) THEN json_type(errors) = 'array' ELSE 0 END
RETURNING queue, state, id, flow
