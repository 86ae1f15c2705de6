-- A claimed job whose row cannot be decoded goes to Dead with the reason.
-- $1 id uuid, $2 now timestamptz, $3 now as RFC 3339 text, $4 reason text.
-- The error history itself may be what is corrupt: it is restarted then.
-- The job is counted in job_counts; a workflow step is
-- counted in workflow_counts and its children, if any, follow, by
-- jq_flow_moved. $5 wake-up channel text.
WITH upd AS (
UPDATE {schema}.jobs AS j
SET state = 'dead',
    finished_at = $2,
    lease_token = NULL,
    lease_worker = NULL,
    lease_expires_at = NULL,
    errors = CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]'::jsonb END
        || jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'at', $3::text, 'message', $4::text))
WHERE j.id = $1 AND j.state = 'running'
RETURNING j.id, j.queue, j.state, j.flow
),
flowed AS (
SELECT {schema}.jq_flow_moved(array_agg(id ORDER BY id), array_agg('running'::text), array_agg(state ORDER BY id),
                              array_agg(flow ORDER BY id), $2, $5) AS moved
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
RETURNING 1
)
SELECT (SELECT count(*) FROM counted) AS counted, (SELECT count(*) FROM flowed) AS flowed
