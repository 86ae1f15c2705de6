-- Workflow $1's steps per state, summed over the shards of its summary
-- rows (workflow_counts, migration 14): a few rows whatever its size, no
-- step read. A row with a NULL state when it is stored but has no count
-- row (every step purged before migration 14); none when unknown.
SELECT c.state, sum(c.n)::int8
FROM {schema}.workflows AS w
LEFT JOIN {schema}.workflow_counts AS c ON c.workflow = w.id
WHERE w.id = $1
GROUP BY c.state
