-- Queue ?1's default key limits (concurrency, rate_limit, rate_period;
-- NULLs when it has none) and whether any key of it has limits of its
-- own: read once per claim by the rotation (rotation.rs), which reads a
-- key's own limits with its head (keys_page_limits.sql) only when some
-- key has them. A real key is never '' (the default's key).
SELECT d.concurrency, d.rate_limit, d.rate_period,
       EXISTS (SELECT 1 FROM key_limits AS o WHERE o.queue = ?1 AND o.key > '')
FROM (SELECT 1) LEFT JOIN key_limits AS d ON d.queue = ?1 AND d.key = ''
