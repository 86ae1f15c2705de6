-- Ack: Running -> Completed, fenced on id ?1 and token ?2. ?3 now.
-- No RETURNING: SQLite runs a RETURNING clause as a trigger, which cost
-- the drain about a third; settle.rs reads the queue by id instead
-- (settle_queue.sql).
UPDATE jobs
SET state = 'completed', finished_at = ?3, lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
