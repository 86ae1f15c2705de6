-- Deletes queue ?1's control once nothing is set any more (the claim's
-- fast path is a queue without a row).
DELETE FROM queue_controls
WHERE queue = ?1 AND paused_at IS NULL AND concurrency IS NULL AND rate_limit IS NULL
