-- Running jobs of queue ?1 (the concurrency slots its leases hold). Walks
-- the Running jobs only (jobs_lease), for queues with a concurrency limit.
SELECT count(*) FROM jobs INDEXED BY jobs_lease WHERE state = 'running' AND queue = ?1
