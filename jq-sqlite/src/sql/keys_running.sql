-- Queue ?1's Running keyed jobs, one row each: the keys' concurrency
-- slots, held by leases, counted per key by the caller (rotation.rs).
-- Read once per claim whose rotation meets a key with a concurrency
-- limit, from jobs_lease (every Running job of the store, a number
-- bounded by the workers' slots, not by the store), keyed jobs having no
-- Running index of their own (001_schema.sql says why). No GROUP BY: it
-- sorted the rows in a temporary b-tree at every claim, where the
-- caller's map counts them as they come.
SELECT key FROM jobs INDEXED BY jobs_lease
WHERE state = 'running' AND queue = ?1 AND key IS NOT NULL
