-- Every limit row of queue ?1 by key: the default first (key ''), then
-- the overrides.
SELECT key, concurrency, rate_limit, rate_period FROM key_limits WHERE queue = ?1 ORDER BY key
