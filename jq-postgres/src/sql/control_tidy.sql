-- Deletes queue $1's control once nothing is set any more, in the
-- transaction that changed it: a queue without a row takes the claim's
-- one-statement path again.
DELETE FROM {schema}.queue_controls
WHERE queue = $1 AND paused_at IS NULL AND concurrency IS NULL AND rate_limit IS NULL
