-- Apply a batch of fenced outcomes in one statement, some of them acks
-- with a result (settle.sql without results): $10 results
-- text[] (NULL for items without one) are stored in job_results by the
-- same statement, for the jobs it acked.
--
-- $1 ids uuid[], $2 tokens uuid[], $3 ops int2[] (0 ack, 1 retry, 2 fail,
-- 3 release, 4 cancel), $4 error messages text[] (NULL for ack/release), $5 run_ats
-- timestamptz[] (now + delay, for retry/release), $6 requeue states text[]
-- ('pending' when the delay is zero, else 'scheduled'), $7 now timestamptz,
-- $8 now as RFC 3339 text (for the error history), $9 wake-up channel text.
--
-- Every row is guarded on state = running AND the caller's token, evaluated
-- on the row's latest version: a stale token changes nothing and its id is
-- simply missing from RETURNING. Ids are distinct (the client deduplicates).
-- SET expressions see the row before the update, so attempts is the attempt
-- that failed. A job handed back as Pending (release, zero-delay retry)
-- sends one NOTIFY per statement so an idle worker picks it up at once,
-- and comes back with its queue, priority and run_at: the caller moves its
-- claim positions back before it (hints.rs), since its key may be one a
-- claim has already passed (released in the instant it was claimed).
-- The jobs it finished are added to job_counts, one row per
-- (queue, state) for the whole batch, on a shard picked per statement.
-- Its workflow steps (flow bit 2) go to jq_flow_moved in
-- one call, which counts them in workflow_counts and runs the rules of
-- those it finished that have children: a batch of plain jobs calls nothing,
-- nor do steps handed back to Pending (a retry with no delay, a release),
-- which the summary counts with Running (sql/workflow_counts.sql).
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::uuid[], $3::int2[], $4::text[], $5::timestamptz[], $6::text[], $10::text[])
        AS t(id, token, op, error, run_at, requeue, result)
),
upd AS (
UPDATE {schema}.jobs AS j
SET state = CASE
        WHEN i.op = 0 THEN 'completed'
        WHEN i.op = 4 THEN 'cancelled'
        WHEN i.op = 2 OR (i.op = 1 AND j.attempts >= j.max_attempts) THEN 'dead'
        ELSE i.requeue
    END,
    attempts = CASE WHEN i.op = 3 THEN j.attempts - 1 ELSE j.attempts END,
    run_at = CASE
        WHEN i.op = 3 OR (i.op = 1 AND j.attempts < j.max_attempts) THEN i.run_at
        ELSE j.run_at
    END,
    finished_at = CASE
        WHEN i.op = 0 OR i.op = 2 OR i.op = 4 OR (i.op = 1 AND j.attempts >= j.max_attempts) THEN $7
        ELSE NULL
    END,
    lease_token = NULL,
    lease_worker = NULL,
    lease_expires_at = NULL,
    errors = CASE
        WHEN i.op IN (1, 2) THEN j.errors
            || jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'at', $8::text, 'message', i.error))
        ELSE j.errors
    END
FROM input AS i
WHERE j.id = i.id AND j.state = 'running' AND j.lease_token = i.token
RETURNING j.id, j.state, j.queue, j.priority, j.run_at, j.flow
),
flowed AS (
SELECT {schema}.jq_flow_moved(array_agg(id ORDER BY id), array_agg('running'::text), array_agg(state ORDER BY id),
                              array_agg(flow ORDER BY id), $7, $9) AS moved
FROM upd
WHERE flow & 2 <> 0 AND state <> 'pending'
HAVING count(*) > 0
),

stored AS (
INSERT INTO {schema}.job_results (id, result)
SELECT i.id, i.result FROM input AS i JOIN upd ON upd.id = i.id
WHERE i.result IS NOT NULL AND upd.state = 'completed'
ON CONFLICT (id) DO UPDATE SET result = excluded.result
),
counted AS (
INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
SELECT queue, state, (SELECT floor(random() * 16)::int2), count(*)
FROM upd
WHERE state IN ('completed', 'dead', 'cancelled')
GROUP BY queue, state
ORDER BY queue, state
ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n
)
SELECT upd.id, upd.state,
       -- NULL for the rest (acks are most rows): nothing to send or decode.
       CASE WHEN upd.state = 'pending' THEN upd.queue END AS queue,
       CASE WHEN upd.state = 'pending' THEN upd.priority END AS priority,
       CASE WHEN upd.state = 'pending' THEN upd.run_at END AS run_at,
       (SELECT count(*) FROM (
            SELECT pg_notify($9, '') FROM upd AS back WHERE back.state = 'pending' LIMIT 1) AS n) AS notified,
       (SELECT count(*) FROM flowed) AS flowed
FROM upd
