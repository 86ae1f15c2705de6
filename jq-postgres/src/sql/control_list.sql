-- Every queue holding a job or with a control, by name, with its control
-- (NULLs where it has none). Reads the whole jobs table: an operator's call.
SELECT q.queue, c.paused_at, c.concurrency, c.rate_limit, c.rate_period
FROM (SELECT DISTINCT queue FROM {schema}.jobs UNION SELECT queue FROM {schema}.queue_controls) AS q
LEFT JOIN {schema}.queue_controls AS c ON c.queue = q.queue
ORDER BY q.queue
