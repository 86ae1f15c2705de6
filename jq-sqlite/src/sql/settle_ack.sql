-- Ack: Running -> Completed, fenced on id ?1 and token ?2. ?3 now.
-- Returns the job's queue, for the counts of finished jobs (counts.rs).
UPDATE jobs
SET state = 'completed', finished_at = ?3, lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
RETURNING queue
