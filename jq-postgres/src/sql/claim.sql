-- Claim up to $2 jobs of the queues $1 in one statement.
--
-- $1 queues text[], $2 limit int4, $3 now timestamptz, $4 worker text,
-- $5 lease expiry timestamptz, $6 the claim's lease token uuid (every job
-- it takes shares it; fencing is per job id and token), $7 start run_ats
-- timestamptz[], $8 start ids uuid[]: four per queue, in $1's order, for
-- priorities 3, 2, 1, 0; a band is walked from just after (run_at, id) =
-- ($7[i], $8[i]), or from its start where they are NULL.
--
-- For each asked queue, one index scan of jobs_claim per priority, from
-- that band's start position, in claim order (run_at, id), skipping rows
-- other claimers hold and stopping at the limit: finished jobs are not in
-- that partial index, and the positions skip the entries that claimed jobs
-- leave behind while an old snapshot keeps them (see hints.rs). The bands
-- are walked highest priority first and the walk is cut at the limit with
-- no ORDER BY: a LATERAL subquery runs once per row of its outer side, in
-- that side's order (here the array's), and a UNION ALL appends its
-- branches in the order written (locking rules out parallel plans), so a
-- band is only walked, and its rows only locked, while the higher ones fell
-- short. An ORDER BY there would sort, i.e. lock every band's limit.
-- Priorities outside 0 to 3 (a corrupt row, buried by the caller) keep
-- their place in the order: above 3 first, below 0 last.
--
-- Queue controls: when an asked queue has one (a row in queue_controls,
-- looked up by primary key), the statement takes nothing and returns one
-- row per controlled queue instead, its name in the `controlled` column
-- (NULL in job rows); the caller then claims through claim_controlled.sql, which
-- locks the controls. A one-time filter over the lookup gates the walks,
-- so a claim over uncontrolled queues pays two index probes.
--
-- Keyed jobs: the walks read jobs_claim, which holds only
-- jobs without a key (its predicate, so no keyed row is ever read). One
-- probe of jobs_keyed per asked queue finds whether it has keyed waiting
-- jobs; when one has, the statement takes nothing and names it in the
-- `keyed` column: the caller claims through claim_keyed.sql (or, with a
-- controlled queue too, claim_controlled.sql), whose rotation takes keyed
-- jobs under their limits (jq_claim_keyed). A claim over queues without
-- keyed jobs pays that probe, nothing else.
--
-- The rows are locked in the CTE (never `id IN (SELECT ... LIMIT)`, which
-- may lock more than the limit), merged across queues, cut to the limit,
-- then updated. With several queues, rows locked but cut are released at
-- the end of the statement and stay claimable.
--
-- The workflow steps taken from Scheduled (flow bit 2) go to jq_flow_moved
-- with the state each leaves, read from its locked row (the
-- latest version), to be counted in workflow_counts. Those taken from
-- Pending are not: the summary counts Pending and Running steps together
-- (sql/workflow_counts.sql says why), so a fan-in's claims, like a claim
-- of plain jobs, call nothing.
WITH controlled AS (
    SELECT qc.queue FROM {schema}.queue_controls AS qc WHERE qc.queue = ANY($1::text[])
),
keyed AS (
    -- LIMIT 1 in a LATERAL keeps it one probe of jobs_keyed per queue (an
    -- EXISTS may become a join that reads the index whole).
    SELECT q.name AS queue FROM unnest($1::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT 1 FROM {schema}.jobs AS jk
        WHERE jk.queue = q.name AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
        LIMIT 1
    ) AS probe
),
picked AS (
    SELECT c.id, c.state, c.flow
    FROM unnest($1::text[]) WITH ORDINALITY AS q(name, n)
    CROSS JOIN LATERAL (
        SELECT u.id, u.priority, u.run_at, u.state, u.flow
        FROM (
            SELECT * FROM (
                SELECT jc.id, jc.priority, jc.run_at, jc.state, jc.flow FROM {schema}.jobs AS jc
                WHERE jc.queue = q.name AND jc.priority > 3
                  AND jc.state IN ('pending', 'scheduled') AND jc.key IS NULL
                  AND (jc.state = 'pending' OR jc.run_at <= $3)
                ORDER BY jc.priority DESC, jc.run_at, jc.id
                LIMIT $2
                FOR UPDATE SKIP LOCKED
            ) AS above
            UNION ALL
            SELECT b.* FROM unnest('{3, 2, 1, 0}'::int2[]) WITH ORDINALITY AS p(priority, k)
            CROSS JOIN LATERAL (
                SELECT jc.id, jc.priority, jc.run_at, jc.state, jc.flow FROM {schema}.jobs AS jc
                WHERE jc.queue = q.name AND jc.priority = p.priority
                  AND (jc.run_at, jc.id) > (coalesce($7[(q.n - 1) * 4 + p.k], '-infinity'),
                                            coalesce($8[(q.n - 1) * 4 + p.k], '00000000-0000-0000-0000-000000000000'))
                  AND jc.state IN ('pending', 'scheduled') AND jc.key IS NULL
                  AND (jc.state = 'pending' OR jc.run_at <= $3)
                ORDER BY jc.run_at, jc.id
                LIMIT $2
                FOR UPDATE SKIP LOCKED
            ) AS b
            UNION ALL
            SELECT * FROM (
                SELECT jc.id, jc.priority, jc.run_at, jc.state, jc.flow FROM {schema}.jobs AS jc
                WHERE jc.queue = q.name AND jc.priority < 0
                  AND jc.state IN ('pending', 'scheduled') AND jc.key IS NULL
                  AND (jc.state = 'pending' OR jc.run_at <= $3)
                ORDER BY jc.priority DESC, jc.run_at, jc.id
                LIMIT $2
                FOR UPDATE SKIP LOCKED
            ) AS below
        ) AS u
        LIMIT $2
    ) AS c
    WHERE NOT EXISTS (SELECT 1 FROM controlled) AND NOT EXISTS (SELECT 1 FROM keyed)
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT $2
),
claimed AS (
    UPDATE {schema}.jobs AS j
    SET state = 'running',
        attempts = j.attempts + 1,
        lease_token = $6,
        lease_worker = $4,
        lease_expires_at = $5
    FROM picked
    WHERE j.id = picked.id
    RETURNING {columns}
),
stepped AS (
    SELECT {schema}.jq_flow_moved(array_agg(id ORDER BY id), array_agg(state ORDER BY id), array_agg('running'::text),
                                  array_agg(flow ORDER BY id), $3, NULL) AS moved
    FROM picked
    WHERE flow & 2 <> 0 AND state <> 'pending'
    HAVING count(*) > 0
)
-- The filter only makes `stepped` run (a SELECT CTE runs when read).
SELECT claimed.*, NULL::text AS controlled, NULL::text AS keyed FROM claimed WHERE (SELECT count(*) FROM stepped) >= 0
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, controlled.queue, NULL
FROM controlled
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, NULL, keyed.queue
FROM keyed
