-- Hand back up to $2 Running jobs whose lease expired.
--
-- $1 now timestamptz, $2 batch size int4, $3 now as RFC 3339 text, $4 the
-- lease expiry to walk from (exclusive; NULL walks the index whole): the
-- end of the previous pass, so the entries that completed jobs leave behind
-- while an old snapshot keeps them are walked once, not by every pass (see
-- RecoverStart in hints.rs). $5 wake-up channel text.
-- ONE guarded statement: the rows are locked in the CTE, and the UPDATE's
-- guard (state = running AND lease_expires_at <= now) is evaluated on the
-- latest row version, so a job a concurrent ack just completed, or a lease a
-- heartbeat just extended, is never overwritten. The locked rows are
-- changed by ctid (stable while they are locked): a join on id with that
-- guard could walk the lease index whole instead (the baseline's index
-- design: migrations/0001_baseline.sql).
-- Returns how many it moved, on every row, and per (queue, priority) with
-- a job made Pending the earliest run_at (NULLs when none): the caller
-- moves its claim positions back before them (hints.rs). Always one row
-- at least. The jobs it made Dead are added to job_counts.
-- A job holding a cancel request goes to Cancelled instead,
-- with no error, and is counted too. The workflow steps it moved go to
-- jq_flow_moved, in the same statement: counted in
-- workflow_counts, and the children of those it finished follow; those
-- made Pending call nothing (the summary counts Pending with Running:
-- sql/workflow_counts.sql).
WITH picked AS (
    SELECT ctid FROM {schema}.jobs
    WHERE state = 'running' AND lease_expires_at <= $1 AND lease_expires_at > coalesce($4, '-infinity')
    ORDER BY lease_expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
moved AS (
UPDATE {schema}.jobs AS j
SET state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
        WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'pending' END,
    run_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts THEN j.run_at ELSE $1 END,
    finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts THEN $1 ELSE NULL END,
    errors = CASE WHEN j.cancel_requested_at IS NOT NULL THEN j.errors
        ELSE j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempts,
        'at', $3::text,
        'message', 'lease expired (worker ' || coalesce(j.lease_worker, '') || ' did not finish or heartbeat in time)'))
        END,
    lease_token = NULL,
    lease_worker = NULL,
    lease_expires_at = NULL
FROM picked
WHERE j.ctid = picked.ctid AND j.state = 'running' AND j.lease_expires_at <= $1
RETURNING j.id, j.queue, j.priority, j.state, j.run_at, j.flow
),
flowed AS (
SELECT {schema}.jq_flow_moved(array_agg(id ORDER BY id), array_agg('running'::text), array_agg(state ORDER BY id),
                              array_agg(flow ORDER BY id), $1, $5) AS moved
FROM moved
WHERE flow & 2 <> 0 AND state <> 'pending'
HAVING count(*) > 0
),
counted AS (
INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
SELECT queue, state, (SELECT floor(random() * 16)::int2), count(*)
FROM moved
WHERE state IN ('dead', 'cancelled')
GROUP BY queue, state
ORDER BY queue, state
ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n
)
SELECT (SELECT count(*) FROM moved) AS moved, m.queue, m.priority, m.run_at,
       (SELECT count(*) FROM flowed) AS flowed
FROM (SELECT 1) AS one
LEFT JOIN (
    SELECT queue, priority, min(run_at) AS run_at FROM moved WHERE state = 'pending' GROUP BY queue, priority
) AS m ON true
