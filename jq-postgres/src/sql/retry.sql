-- Operator retry: Dead -> Pending with one more attempt, errors kept.
-- $1 id uuid, $2 now timestamptz. No row returned: unknown id or not Dead
-- (the caller looks the job up to say which). $3 wake-up channel text.
--
-- A job whose unique key a newer live job of its queue holds comes back too
-- (both are then live; enqueue of that key returns the smaller id): it takes
-- a slot of its own in jobs_unique (its id) instead of the shared nil slot.
-- Should a concurrent enqueue take the nil slot after this statement's
-- snapshot, this fails with a unique violation and the caller re-runs it.
-- The job leaves the Dead count of job_counts. A workflow
-- step moves from Dead to Pending in workflow_counts, and the children its
-- failure cancelled come back to Waiting, in the same statement
-- (jq_flow_moved).
WITH upd AS (
UPDATE {schema}.jobs AS j
SET state = 'pending',
    run_at = $2,
    finished_at = NULL,
    lease_token = NULL,
    lease_worker = NULL,
    lease_expires_at = NULL,
    cancel_requested_at = NULL,
    cancel_reason = NULL,
    max_attempts = greatest(j.max_attempts, j.attempts + 1),
    key_slot = CASE
        WHEN j.unique_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM {schema}.jobs AS o
            WHERE o.queue = j.queue AND o.unique_key = j.unique_key AND o.unique_key IS NOT NULL
              AND o.state IN ('scheduled', 'pending', 'running') AND o.id <> j.id)
        THEN j.id
        ELSE '00000000-0000-0000-0000-000000000000'::uuid
    END
WHERE j.id = $1 AND j.state = 'dead'
RETURNING j.id, j.queue, j.priority, j.run_at, j.flow
),
flowed AS (
SELECT {schema}.jq_flow_moved(array_agg(id ORDER BY id), array_agg('dead'::text), array_agg('pending'::text),
                              array_agg(flow ORDER BY id), $2, $3) AS moved
FROM upd
WHERE flow & 2 <> 0
HAVING count(*) > 0
),
counted AS (
INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
SELECT queue, 'dead', (SELECT floor(random() * 16)::int2), -count(*)
FROM upd
GROUP BY queue
ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n
)
SELECT upd.id, upd.queue, upd.priority, upd.run_at, (SELECT count(*) FROM (SELECT pg_notify($3, '')) AS n) AS notified,
       (SELECT count(*) FROM flowed) AS flowed
FROM upd
