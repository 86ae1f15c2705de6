-- Job $1's node: one row when the job exists, the node's columns NULL for
-- a job outside any workflow.
-- A cascade-cancelled job reports its first failed parent in step order
-- (whatever order the failures came in); NULL otherwise.
SELECT n.workflow, n.step, n.unfinished,
       CASE WHEN n.cancelled_by IS NOT NULL AND j.state = 'cancelled' THEN (
           SELECT d.parent FROM {schema}.job_deps AS d JOIN {schema}.jobs AS p ON p.id = d.parent
           WHERE d.child = j.id AND NOT d.released AND d.on_failure = 'cancel' AND p.state IN ('dead', 'cancelled')
           ORDER BY d.position LIMIT 1)
       END
FROM {schema}.jobs AS j LEFT JOIN {schema}.job_nodes AS n ON n.id = j.id
WHERE j.id = $1
