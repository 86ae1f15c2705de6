-- Workflow $1's steps in order, each with its parents' ids; no row for an
-- unknown workflow (the caller tells that apart with workflow_counts).
SELECT n.id, n.step, j.kind, j.state,
       coalesce((SELECT array_agg(d.parent ORDER BY d.position) FROM {schema}.job_deps AS d WHERE d.child = n.id),
                '{}'::uuid[])
FROM {schema}.job_nodes AS n JOIN {schema}.jobs AS j ON j.id = n.id
WHERE n.workflow = $1
ORDER BY n.position
