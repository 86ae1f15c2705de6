-- Waiting, Scheduled or Pending -> Cancelled (a workflow step is counted in
-- workflow_counts and its dependents follow, in the same statement:
-- jq_flow_moved). $1 id uuid, $2 now timestamptz, $3 wake-up
-- channel text.
-- No row returned: unknown id or another state (the caller looks it up).
--
-- The row is locked by primary key first (`target`), for the state it
-- leaves, read from its latest version, which no one else can change until
-- this statement commits; then a plain guarded UPDATE by primary key,
-- which PostgreSQL re-checks on that latest version. It was changed by the
-- ctid the lock returned, but when another transaction changed the row
-- while the lock waited (the ack that releases a Waiting step, a promote)
-- that ctid is the new version's, which the statement's snapshot cannot
-- see: the UPDATE matched nothing and a Pending job's cancel failed with
-- InvalidState (storage test a_cancel_racing_the_ack_...). The guard names
-- three states including 'waiting', so no partial index of claimable jobs
-- (whose predicate a plan built on statistics that saw none would walk
-- whole: migrations/0001_baseline.sql) can serve it.
-- The job is counted in job_counts.
WITH target AS (
    SELECT state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
),
upd AS (
UPDATE {schema}.jobs AS j
SET state = 'cancelled', finished_at = $2
FROM target
WHERE j.id = $1 AND j.state IN ('waiting', 'scheduled', 'pending')
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
