-- Claim up to $2 jobs of the queues $1 in one statement.
--
-- $1 queues text[], $2 limit int4, $3 now timestamptz, $4 worker text,
-- $5 lease expiry timestamptz, $6 the claim's lease token uuid (every job
-- it takes shares it; fencing is per job id and token).
--
-- For each asked queue, a LATERAL subquery walks jobs_claim in claim order
-- (priority DESC, run_at, id), skips rows other claimers hold and stops at
-- the limit: finished jobs are not in that partial index, so their number
-- does not matter. The rows are locked in the CTE (never `id IN (SELECT ...
-- LIMIT)`, which may lock more than the limit), merged across queues, cut to
-- the limit, then updated. With several queues, rows locked but cut are
-- released at the end of the statement and stay claimable.
WITH picked AS (
    SELECT c.id
    FROM unnest($1::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT jc.id, jc.priority, jc.run_at
        FROM {schema}.jobs AS jc
        WHERE jc.queue = q.name
          AND jc.state IN ('pending', 'scheduled')
          AND (jc.state = 'pending' OR jc.run_at <= $3)
        ORDER BY jc.priority DESC, jc.run_at, jc.id
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT $2
)
UPDATE {schema}.jobs AS j
SET state = 'running',
    attempts = j.attempts + 1,
    lease_token = $6,
    lease_worker = $4,
    lease_expires_at = $5
FROM picked
WHERE j.id = picked.id
RETURNING {columns}
