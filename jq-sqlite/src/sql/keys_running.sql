-- Queue ?1's Running keyed jobs per key: the keys' concurrency slots,
-- held by leases. Read once per claim whose rotation meets a key with a
-- concurrency limit, from jobs_lease (every Running job of the store, a
-- number bounded by the workers' slots, not by the store), keyed jobs
-- having no Running index of their own (011_keys.sql says why).
SELECT key, count(*) FROM jobs INDEXED BY jobs_lease
WHERE state = 'running' AND queue = ?1 AND key IS NOT NULL
GROUP BY key
