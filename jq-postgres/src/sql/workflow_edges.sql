-- Job $1's parents in step order with the job's policy for each, purged
-- parents included (the edge outlives them, as in every backend).
SELECT d.parent, d.on_failure FROM {schema}.job_deps AS d WHERE d.child = $1 ORDER BY d.position
