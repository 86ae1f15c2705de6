-- A sleep or a wait: Running job $1 under token $2 becomes Scheduled at $3
-- with its attempt given back and its lease cleared (a release with a
-- delay). A workflow step (flow bit 2) moves its workflow's counts through
-- jq_flow_moved, as settle.sql does; a plain job calls nothing. $4 now.
WITH upd AS (
UPDATE {schema}.jobs
SET state = 'scheduled', attempts = attempts - 1, run_at = $3,
    lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL
WHERE id = $1 AND lease_token = $2 AND state = 'running'
RETURNING id, flow
),
flowed AS (
SELECT {schema}.jq_flow_moved(array_agg(id), array_agg('running'::text), array_agg('scheduled'::text),
                              array_agg(flow), $4, NULL) AS moved
FROM upd
WHERE flow & 2 <> 0
HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM flowed)
