-- The limits of queue ?1 and key ?2 (key '': the queue's default):
-- concurrency, rate_limit, rate_period. No row: none set.
SELECT concurrency, rate_limit, rate_period FROM key_limits WHERE queue = ?1 AND key = ?2
