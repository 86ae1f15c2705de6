-- Job $1's node: one row when the job exists, the node's columns NULL for
-- a job outside any workflow.
SELECT n.workflow, n.step, n.unfinished, n.cancelled_by
FROM {schema}.jobs AS j LEFT JOIN {schema}.job_nodes AS n ON n.id = j.id
WHERE j.id = $1
