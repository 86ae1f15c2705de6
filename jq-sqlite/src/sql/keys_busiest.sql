-- Queue ?1's ?2 busiest keys: those with a Running, Pending or Scheduled
-- job, each with its Running jobs and its Pending plus Scheduled ones, by
-- their sum descending, then key (bytes). Read from jobs_lease (every
-- Running job) and jobs_keyed: no finished job, no plain waiting job.
SELECT key, sum(running), sum(waiting) FROM (
    SELECT key, 1 AS running, 0 AS waiting FROM jobs INDEXED BY jobs_lease
    WHERE state = 'running' AND queue = ?1 AND key IS NOT NULL
    UNION ALL
    SELECT key, 0, 1 FROM jobs INDEXED BY jobs_keyed
    WHERE key IS NOT NULL AND (state = 'pending' OR state = 'scheduled') AND queue = ?1
)
GROUP BY key
ORDER BY sum(running) + sum(waiting) DESC, key
LIMIT ?2
