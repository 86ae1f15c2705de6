-- Operator retry of Dead job ?1: Pending at ?2 (now), errors kept, one more
-- attempt granted. A keyed job waits with its marker (keyed_wait).
UPDATE jobs
SET state = 'pending', run_at = ?2, finished_at = NULL, keyed_wait = key,
    lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL,
    cancel_requested_at = NULL, cancel_reason = NULL,
    max_attempts = max(max_attempts, attempts + 1)
WHERE id = ?1 AND state = 'dead'
RETURNING queue, flow
