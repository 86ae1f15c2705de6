-- Workflow $1's steps per state, summed over the shards of its summary
-- rows (workflow_counts): a few rows whatever its size. A
-- row with a NULL state when it is stored but has no count row (every step
-- purged); none when unknown.
--
-- The summary's 'pending' and 'running' rows are read as one count, the
-- workflow's active steps: the statements do not write the summary when a
-- step moves between the two (a claim from Pending, a retry with no delay
-- or a release back to it, a recovery to it), so each row alone drifts
-- (acks take Running steps from the 'running' rows that claims never
-- added to) while their sum stays exact. *Why: that write was a large
-- share of a wide fan-in's time, and the fan-in drained well below the
-- plain drain with it and as fast without (BENCHMARKS.md's workflow
-- scenarios).* Running is counted here instead, from the store's leased jobs
-- (jobs_lease_expiry holds exactly the Running jobs, a number bounded by
-- the workers' slots, not by the store or the workflow), each step looked
-- up in job_nodes by key; Pending is the rest. One statement, one
-- snapshot: the split agrees with the sum.
WITH summed AS (
    SELECT CASE WHEN c.state IN ('pending', 'running') THEN 'active' ELSE c.state END AS state,
           sum(c.n)::int8 AS n
    FROM {schema}.workflows AS w
    LEFT JOIN {schema}.workflow_counts AS c ON c.workflow = w.id
    WHERE w.id = $1
    GROUP BY 1
),
leased AS MATERIALIZED (
    SELECT j.id FROM {schema}.jobs AS j
    WHERE j.lease_expires_at IS NOT NULL AND j.state = 'running' AND j.flow & 2 <> 0
),
running AS (
    SELECT count(*)::int8 AS n
    FROM leased AS l
    WHERE (SELECT n.workflow FROM {schema}.job_nodes AS n WHERE n.id = l.id) = $1
)
SELECT s.state, s.n FROM summed AS s WHERE s.state IS DISTINCT FROM 'active'
UNION ALL
SELECT v.state, v.n
FROM summed AS s CROSS JOIN running AS r
CROSS JOIN LATERAL (VALUES ('running', r.n), ('pending', s.n - r.n)) AS v(state, n)
WHERE s.state = 'active'
