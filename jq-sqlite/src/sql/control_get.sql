-- The control of queue ?1: paused_at, concurrency, rate_limit,
-- rate_period (no row: no control). Read by every claim, per asked queue.
SELECT paused_at, concurrency, rate_limit, rate_period FROM queue_controls WHERE queue = ?1
