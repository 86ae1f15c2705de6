-- Sets queue ?1's limits: concurrency ?2, rate ?3 starts per ?4 µs (NULL:
-- no such limit).
INSERT INTO queue_controls (queue, concurrency, rate_limit, rate_period) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (queue) DO UPDATE SET concurrency = ?2, rate_limit = ?3, rate_period = ?4
