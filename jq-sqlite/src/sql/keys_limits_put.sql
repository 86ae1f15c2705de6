-- Sets the limits of queue ?1 and key ?2 (key '': the queue's default):
-- concurrency ?3, rate ?4 starts per ?5 µs (NULL: no such limit).
INSERT INTO key_limits (queue, key, concurrency, rate_limit, rate_period) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (queue, key) DO UPDATE SET concurrency = ?3, rate_limit = ?4, rate_period = ?5
