-- Workflow $1's jobs per state, and whether it is stored at all (a row
-- with a NULL state when it has no job left).
SELECT j.state, count(j.id)
FROM {schema}.workflows AS w
LEFT JOIN {schema}.job_nodes AS n ON n.workflow = w.id
LEFT JOIN {schema}.jobs AS j ON j.id = n.id
WHERE w.id = $1
GROUP BY j.state
