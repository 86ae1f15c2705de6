-- Queue $1's key limits by key: the default first (key
-- ''), then the overrides in byte order.
SELECT l.key, l.concurrency, l.rate_limit, l.rate_period
FROM {schema}.key_limits AS l
WHERE l.queue = $1
ORDER BY l.key
