-- Plain Scheduled jobs of queue ?1 and priority ?2 that are due at ?3, in claim
-- order (a range scan of the jobs_plain_scheduled index); the caller stops
-- stepping at its limit.
SELECT seq, id, priority, run_at FROM jobs
WHERE queue = ?1 AND state = 'scheduled' AND key IS NULL AND priority = ?2 AND run_at <= ?3
ORDER BY run_at, id
