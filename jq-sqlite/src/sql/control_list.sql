-- Every queue holding a job or with a control, and its control (NULLs
-- where it has none). A queue holds finished jobs when one of its counters
-- is above zero (job_counts), live ones when a partial
-- index of live jobs has any of it (each term repeats its index's WHERE;
-- keyed jobs are in their own index, jobs_keyed_waiting):
-- no finished job is read.
SELECT q.queue, c.paused_at, c.concurrency, c.rate_limit, c.rate_period
FROM (
    SELECT queue FROM job_counts WHERE n > 0
    UNION SELECT queue FROM jobs WHERE state = 'pending' AND key IS NULL
    UNION SELECT queue FROM jobs WHERE state = 'scheduled' AND key IS NULL
    UNION SELECT queue FROM jobs WHERE keyed_wait IS NOT NULL AND (state = 'pending' OR state = 'scheduled')
    UNION SELECT queue FROM jobs WHERE state = 'running'
    UNION SELECT queue FROM queue_controls
) AS q
LEFT JOIN queue_controls AS c ON c.queue = q.queue
ORDER BY q.queue
