-- Claim up to $2 jobs of the queues $1, some with keyed jobs, none with a
-- control, in one autocommit statement (jq_claim_keyed_take:
-- the key locks, the picks, the update, in the call).
--
-- $1 queues text[], $2 limit int4, $3 now timestamptz, $4 worker text,
-- $5 lease expiry timestamptz, $6 the claim's lease token uuid.
--
-- Returns the claimed jobs, then one row per asked queue with keyed
-- waiting jobs (before the claim; its name in the `keyed` column, NULL in
-- job rows), so the storage goes on claiming them here, or back to
-- claim.sql once none has. Its `keyed_due` says, after a short claim,
-- whether a claimable keyed job is left: held back by its key's limits
-- (ClaimAnswer::limited), which the caller learns without another
-- statement. When an asked queue has a control, the
-- statement takes nothing and returns one row per controlled queue, its
-- name in the `controlled` column, as claim.sql does: the caller claims
-- through claim_controlled.sql.
WITH controlled AS (
    SELECT qc.queue FROM {schema}.queue_controls AS qc WHERE qc.queue = ANY($1::text[])
),
taken AS MATERIALIZED (
    SELECT j.* FROM {schema}.jq_claim_keyed_take($1::text[], $2::int4, $3::timestamptz, $4::text, $5::timestamptz, $6::uuid) AS j
    WHERE NOT EXISTS (SELECT 1 FROM controlled)
),
keyed AS (
    -- A queue of which the claim took a keyed job had one waiting; only
    -- the others are probed (once each: LIMIT 1). *The probe walks
    -- jobs_keyed from its start, past the entries of the jobs a drain
    -- already took, until vacuum removes them; the planner, seeing many
    -- keyed rows, even read the table from its start instead. The claims
    -- of a busy keyed queue take keyed jobs, so they skip it.*
    -- (A LATERAL of LIMIT 1 over UNION ALL: its branches run in order, and
    -- the second only when the first found nothing. Two EXISTS under an OR
    -- were planned as hashed subplans, reading every keyed job.)
    SELECT q.name AS queue FROM unnest($1::text[]) AS q(name)
    CROSS JOIN LATERAL (
        (SELECT 1 FROM taken AS t WHERE t.queue = q.name AND t.key IS NOT NULL LIMIT 1)
        UNION ALL
        (SELECT 1 FROM {schema}.jobs AS jk
         WHERE jk.queue = q.name AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
         ORDER BY jk.priority DESC LIMIT 1)
        LIMIT 1
    ) AS probe
),
due AS (
    -- Per keyed queue, after a short claim only, whether it holds a
    -- claimable keyed job besides those this claim took: the snapshot
    -- still shows them waiting, so more claimable keyed jobs than it took
    -- of the queue. A walk of jobs_keyed in its order (ORDER BY, LIMIT),
    -- of at most one entry more than it took; a CASE, not an AND, so a
    -- full claim never walks (an AND's operands run in any order).
    SELECT keyed.queue,
           CASE WHEN (SELECT count(*) FROM taken) < $2::int4 THEN (
               SELECT count(*) > n.took FROM (
                   SELECT 1 FROM {schema}.jobs AS jd
                   WHERE jd.queue = keyed.queue AND jd.key IS NOT NULL
                     AND jd.state IN ('pending', 'scheduled')
                     AND (jd.state = 'pending' OR jd.run_at <= $3)
                   ORDER BY jd.priority DESC
                   LIMIT n.took + 1) AS w)
           END AS keyed_due
    FROM keyed
    CROSS JOIN LATERAL (
        SELECT count(*) AS took FROM taken AS t WHERE t.queue = keyed.queue AND t.key IS NOT NULL
    ) AS n
)
SELECT {columns}, NULL::text AS controlled, NULL::text AS keyed, NULL::bool AS keyed_due
FROM taken AS j
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, controlled.queue, NULL, NULL
FROM controlled
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, due.queue, due.keyed_due
FROM due
WHERE NOT EXISTS (SELECT 1 FROM controlled)
