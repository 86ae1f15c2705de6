-- Job $1's children in step order.
SELECT d.child FROM {schema}.job_deps AS d JOIN {schema}.job_nodes AS n ON n.id = d.child
WHERE d.parent = $1 ORDER BY n.position
