-- Cancel job $1 whatever its state (CancelStorage::request_cancel). $2 now
-- timestamptz, $3 reason text, $4 wake-up channel text.
--
-- Waiting, Scheduled or Pending -> Cancelled (counted in job_counts);
-- Running: the request is stored unless one is (a resend
-- keeps the first). Returns the job's new state ('cancelled' or
-- 'running'); no row when it is in another state or unknown (the caller
-- looks it up). A workflow step that became Cancelled here is counted in
-- workflow_counts, and takes its children with it, or releases them under
-- run_anyway (jq_flow_moved).
--
-- A plain guarded UPDATE by primary key, re-checked by PostgreSQL on the
-- latest row version: a heartbeat or a settlement may change the row at
-- the same instant, and an UPDATE joined on a ctid read under the
-- statement's snapshot would then match nothing. The guard names four
-- states, so no partial index of one state can serve it.
-- The row is locked by key first (`target`) for the state it leaves,
-- read from its latest version, which no one else can change until this
-- statement commits: a step's count moves out of that state.
WITH target AS (
    SELECT state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
),
upd AS (
UPDATE {schema}.jobs AS j
SET state = CASE WHEN j.state = 'running' THEN j.state ELSE 'cancelled' END,
    finished_at = CASE WHEN j.state = 'running' THEN j.finished_at ELSE $2 END,
    cancel_requested_at = CASE WHEN j.state = 'running' THEN coalesce(j.cancel_requested_at, $2)
        ELSE j.cancel_requested_at END,
    cancel_reason = CASE WHEN j.state = 'running' AND j.cancel_requested_at IS NULL THEN $3
        ELSE j.cancel_reason END
FROM target
WHERE j.id = $1 AND j.state IN ('waiting', 'scheduled', 'pending', 'running')
RETURNING j.id, j.queue, j.state, j.flow, target.state AS was
),
flowed AS (
SELECT {schema}.jq_flow_moved(array_agg(id ORDER BY id), array_agg(was ORDER BY id), array_agg(state ORDER BY id),
                              array_agg(flow ORDER BY id), $2, $4) AS moved
FROM upd
WHERE flow & 2 <> 0 AND state <> was
HAVING count(*) > 0
),
counted AS (
INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
SELECT queue, state, (SELECT floor(random() * 16)::int2), count(*)
FROM upd
WHERE state = 'cancelled'
GROUP BY queue, state
ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n
)
SELECT state, (SELECT count(*) FROM flowed) AS flowed FROM upd
