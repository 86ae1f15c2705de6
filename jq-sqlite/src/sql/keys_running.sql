-- Running jobs of queue ?1 and key ?2: the key's concurrency slots held
-- by leases (jobs_keyed_running holds the Running keyed jobs only).
SELECT count(*) FROM jobs INDEXED BY jobs_keyed_running
WHERE key IS NOT NULL AND state = 'running' AND queue = ?1 AND key = ?2
