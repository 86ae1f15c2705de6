-- Queue ?1's ?2 busiest keys: those with a Running, Pending or Scheduled
-- job, each with its Running jobs and its Pending plus Scheduled ones, by
-- their sum descending, then key (bytes). Read from jobs_lease (every
-- Running job) and jobs_keyed_waiting (its state terms pass
-- over a stale marker): no finished job, no plain waiting job.
SELECT key, sum(running), sum(waiting) FROM (
    SELECT key, 1 AS running, 0 AS waiting FROM jobs INDEXED BY jobs_lease
    WHERE state = 'running' AND queue = ?1 AND key IS NOT NULL
    UNION ALL
    SELECT key, 0, 1 FROM jobs INDEXED BY jobs_keyed_waiting
    WHERE keyed_wait IS NOT NULL AND queue = ?1 AND (state = 'pending' OR state = 'scheduled')
)
GROUP BY key
ORDER BY sum(running) + sum(waiting) DESC, key
LIMIT ?2
