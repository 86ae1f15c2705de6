-- Delete up to $3 jobs in terminal state $1 that finished before $2, the
-- oldest first, and return how many. Called in a loop; each statement is
-- bounded so it never holds many locks or builds one huge transaction.
--
-- The ORDER BY walks jobs_finished (state, finished_at) and stops at the
-- limit; without it the planner may scan the heap from its start, which
-- earlier batches emptied, so each batch would read further. The picked rows
-- are locked (rows a retry holds are left for the next batch) and deleted
-- by ctid: `id IN (subquery)` made the planner hash-join the whole table.
-- What was deleted leaves job_counts, per queue and state, in the same
-- statement, and the workflow rows of the deleted jobs go with them (a
-- step's node and a result, which have no foreign key on jobs:
-- migrations/0001_baseline.sql says why): found by key, `= ANY(ARRAY(...))`
-- for the index. A node is looked for only for a workflow step (flow bit
-- 2), and a purged step leaves its workflow's count (workflow_counts: one
-- jq_workflow_count call, none for plain jobs); the workflow stays known.
WITH gone AS (
DELETE FROM {schema}.jobs
WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM {schema}.jobs
    WHERE state = $1 AND finished_at < $2
    ORDER BY finished_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
))
RETURNING id, queue, state, flow
),
nodes_gone AS (
DELETE FROM {schema}.job_nodes WHERE id = ANY(ARRAY(SELECT id FROM gone WHERE flow & 2 <> 0))
RETURNING id, workflow
),
stepped AS (
SELECT {schema}.jq_workflow_count(array_agg(n.workflow), array_agg(g.state), array_agg(NULL::text)) AS counted
FROM nodes_gone AS n JOIN gone AS g ON g.id = n.id
HAVING count(*) > 0
),
results_gone AS (
DELETE FROM {schema}.job_results WHERE id = ANY(ARRAY(SELECT id FROM gone))
),
-- A durable job's journal, signals and wait (flow bit 4) go with it.
journal_gone AS (
DELETE FROM {schema}.journal WHERE job_id = ANY(ARRAY(SELECT id FROM gone WHERE flow & 4 <> 0))
),
signals_gone AS (
DELETE FROM {schema}.signals WHERE job_id = ANY(ARRAY(SELECT id FROM gone WHERE flow & 4 <> 0))
),
waits_gone AS (
DELETE FROM {schema}.waits WHERE job_id = ANY(ARRAY(SELECT id FROM gone WHERE flow & 4 <> 0))
),
counted AS (
INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
SELECT queue, state, (SELECT floor(random() * 16)::int2), -count(*)
FROM gone
GROUP BY queue, state
ORDER BY queue, state
ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n
)
SELECT count(*), (SELECT count(*) FROM stepped) AS stepped FROM gone
