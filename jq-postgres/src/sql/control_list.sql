-- Every queue holding a job or with a control, by name, with its control
-- (NULLs where it has none). A queue holds finished jobs when its counters
-- sum above zero (job_counts), live ones when jobs_claim (the
-- Pending and Scheduled ones), jobs_waiting_on_parents (the Waiting ones)
-- or jobs_lease_expiry (the Running ones) has any of it: no finished job
-- is read.
SELECT q.queue, c.paused_at, c.concurrency, c.rate_limit, c.rate_period
FROM (
    SELECT queue FROM {schema}.job_counts GROUP BY queue HAVING sum(n) > 0
    UNION
    SELECT queue FROM {schema}.jobs WHERE state IN ('pending', 'scheduled') AND key IS NULL
    UNION
    SELECT queue FROM {schema}.jobs WHERE key IS NOT NULL AND state IN ('pending', 'scheduled')
    UNION
    SELECT queue FROM {schema}.jobs WHERE state = 'waiting'
    UNION
    SELECT queue FROM {schema}.jobs WHERE lease_expires_at IS NOT NULL
    UNION
    SELECT queue FROM {schema}.queue_controls
) AS q
LEFT JOIN {schema}.queue_controls AS c ON c.queue = q.queue
ORDER BY q.queue
