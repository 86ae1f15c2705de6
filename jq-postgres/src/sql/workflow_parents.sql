-- Job $1's parents in step order, each with its policy, step, state and
-- result (the parents still stored).
SELECT d.parent, d.on_failure, coalesce(n.step, ''), p.state, r.result
FROM {schema}.job_deps AS d
JOIN {schema}.jobs AS p ON p.id = d.parent
LEFT JOIN {schema}.job_nodes AS n ON n.id = d.parent
LEFT JOIN {schema}.job_results AS r ON r.id = d.parent
WHERE d.child = $1
ORDER BY d.position
