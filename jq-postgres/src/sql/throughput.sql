-- Jobs that reached Completed or Dead since $1, per queue and minute (UTC).
-- One range of jobs_finished (state, finished_at) per state: the cost is
-- the jobs finished in the range, not the table.
SELECT queue,
       date_trunc('minute', finished_at, 'UTC') AS minute,
       count(*) FILTER (WHERE state = 'completed') AS completed,
       count(*) FILTER (WHERE state = 'dead') AS dead
FROM {schema}.jobs
WHERE state IN ('completed', 'dead') AND finished_at >= $1
GROUP BY 1, 2
ORDER BY 1, 2
