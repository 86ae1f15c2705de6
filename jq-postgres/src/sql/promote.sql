-- Make up to $2 due Scheduled jobs Pending.
--
-- $1 now timestamptz, $2 batch size int4. Rows another promoter or a claimer
-- holds are skipped (they are being moved already); the UPDATE re-checks the
-- state on the latest row version, so each job is moved once. The locked
-- rows are changed by ctid (stable while they are locked): a join on id with
-- that guard could walk jobs_scheduled whole instead (the baseline's index
-- design: migrations/0001_baseline.sql).
--
-- Returns how many moved, and per (queue, priority) the earliest run_at
-- moved (none when nothing moved): a claim that skipped one of these rows
-- while it was locked here may have started its band past it (hints.rs).
-- The workflow steps it moved (flow bit 2) go to jq_flow_moved, which
-- moves their counts in workflow_counts; plain jobs call nothing.
WITH picked AS (
    SELECT ctid FROM {schema}.jobs
    WHERE state = 'scheduled' AND run_at <= $1
    ORDER BY run_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {schema}.jobs AS j
    SET state = 'pending'
    FROM picked
    WHERE j.ctid = picked.ctid AND j.state = 'scheduled'
    RETURNING j.id, j.queue, j.priority, j.run_at, j.flow
),
stepped AS (
    SELECT {schema}.jq_flow_moved(array_agg(id ORDER BY id), array_agg('scheduled'::text), array_agg('pending'::text),
                                  array_agg(flow ORDER BY id), $1, NULL) AS moved
    FROM moved
    WHERE flow & 2 <> 0
    HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM moved) AS moved, m.queue, m.priority, m.run_at,
       (SELECT count(*) FROM stepped) AS stepped
FROM (SELECT queue, priority, min(run_at) AS run_at FROM moved GROUP BY queue, priority) AS m
