-- A signal for the wait of Scheduled job $1: Pending at $2 (now), with a
-- NOTIFY on channel $3 so an idle worker takes it at once. A workflow step
-- moves its workflow's counts as promote.sql does. Returns the queue,
-- priority and run_at for the claim positions (hints.rs).
WITH upd AS (
UPDATE {schema}.jobs SET state = 'pending', run_at = $2 WHERE id = $1 AND state = 'scheduled'
RETURNING id, queue, priority, run_at, flow
),
flowed AS (
SELECT {schema}.jq_flow_moved(array_agg(id), array_agg('scheduled'::text), array_agg('pending'::text),
                              array_agg(flow), $2, NULL) AS moved
FROM upd
WHERE flow & 2 <> 0
HAVING count(*) > 0
)
SELECT queue, priority, run_at, (SELECT count(*) FROM flowed),
       (SELECT count(*) FROM (SELECT pg_notify($3, '')) AS n)
FROM upd
