-- Waiting, Scheduled or Pending -> Cancelled (a workflow step is counted in
-- workflow_counts and its dependents follow, in the same statement:
-- jq_flow_moved, migration 14). $1 id uuid, $2 now timestamptz, $3 wake-up
-- channel text.
-- No row returned: unknown id or another state (the caller looks it up).
--
-- The row is found by primary key and locked first, then changed by its
-- ctid: `id = $1 AND state IN ('scheduled', 'pending')` in one WHERE would
-- also match the claim index's predicate, and a plan built on statistics
-- that saw no claimable job walks that whole index instead (see migration
-- 3). The state guard is evaluated on the locked, latest row version,
-- whose state the lock returns: the state the step leaves.
-- The job is counted in job_counts (migration 8).
WITH target AS (
    SELECT ctid, state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
),
upd AS (
UPDATE {schema}.jobs AS j
SET state = 'cancelled', finished_at = $2
FROM target
WHERE j.ctid = target.ctid AND j.state IN ('waiting', 'scheduled', 'pending')
RETURNING j.id, j.queue, j.state, j.flow, target.state AS was
),
flowed AS (
SELECT {schema}.jq_flow_moved(array_agg(id ORDER BY id), array_agg(was ORDER BY id), array_agg(state ORDER BY id),
                              array_agg(flow ORDER BY id), $2, $3) AS moved
FROM upd
WHERE flow & 2 <> 0
HAVING count(*) > 0
),
counted AS (
INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
SELECT queue, state, (SELECT floor(random() * 16)::int2), count(*)
FROM upd
GROUP BY queue, state
ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n
)
SELECT id, (SELECT count(*) FROM flowed) AS flowed FROM upd
