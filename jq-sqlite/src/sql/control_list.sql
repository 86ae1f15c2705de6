-- Every queue holding a job or with a control, and its control (NULLs
-- where it has none). Reads the whole jobs table: an operator's call.
SELECT q.queue, c.paused_at, c.concurrency, c.rate_limit, c.rate_period
FROM (SELECT DISTINCT queue FROM jobs UNION SELECT queue FROM queue_controls) AS q
LEFT JOIN queue_controls AS c ON c.queue = q.queue
ORDER BY q.queue
