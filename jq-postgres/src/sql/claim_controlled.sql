-- Claim up to $2 jobs of the queues $1 when one of them has a control,
-- inside the transaction that locked the controls (control_lock.sql).
--
-- $1 queues text[], $2 limit int4, $3 now timestamptz, $4 worker text,
-- $5 lease expiry timestamptz, $6 the claim's lease token uuid, $7 the
-- instant at or before which claimers are forgotten (now - SEEN_TTL), $8
-- keyed text[]: the asked queues with keyed jobs, whose key locks the
-- transaction holds (control_lock.sql); empty when none.
--
-- Keyed jobs: without keyed queues the jobs are each
-- queue's best without a key (jobs_claim), as below. With keyed queues,
-- jq_claim_keyed (src/functions/) picks and locks them instead, within
-- the same allowances: the plain jobs and each keyed queue's rotation,
-- merged. The transaction runs generic plans (pooler.rs, begin_generic).
--
-- Each queue's allowance: $2 without a control; 0 when paused; else $2
-- capped by its concurrency minus its Running jobs (their leases: the
-- jobs_lease_expiry index holds exactly the Running jobs) and by its rate
-- limit minus its starts after now - period (a period stored before
-- jq refused those over 100 years, 3155760000000000 µs, counts as 100
-- years: now - period must stay a timestamp). Then each queue's best jobs,
-- up to its allowance, locked with SKIP LOCKED (never `id IN (SELECT ...
-- LIMIT)`), merged in claim order and cut at $2, and taken. Jobs not taken
-- are not touched. The same statement records the starts of rate-limited
-- queues, forgets starts that left their window, and records that $4 met
-- each control. The workflow steps taken from Scheduled (flow bit 2) go to
-- jq_flow_moved with the state each leaves, read from its
-- locked row, to be counted; from Pending they call nothing, as plain jobs
-- (the summary counts Pending and Running together: claim.sql).
-- Returns the claimed jobs, then, when the claim is short, one row per
-- asked queue not paused with what held back the jobs it left (`held`
-- names the queue; NULL in job rows): no statement after the commit.
WITH ctl AS (
    SELECT q.name, q.n, c.queue IS NOT NULL AS controlled, c.paused_at IS NOT NULL AS paused,
           c.rate_limit IS NOT NULL AS rated, c.concurrency IS NOT NULL AS concurrency_limited, c.rate_limit,
           least(c.rate_period, 3155760000000000) * interval '1 microsecond' AS period,
           $3::timestamptz - least(c.rate_period, 3155760000000000) * interval '1 microsecond' AS window_after,
           CASE
               WHEN c.queue IS NULL THEN $2::int4
               WHEN c.paused_at IS NOT NULL THEN 0
               ELSE greatest(0, least(
                   $2::int4,
                   c.concurrency - (SELECT count(*) FROM {schema}.jobs AS r
                                    WHERE r.lease_expires_at IS NOT NULL AND r.queue = q.name),
                   c.rate_limit - (SELECT coalesce(sum(s.n), 0) FROM {schema}.queue_starts AS s
                                   WHERE s.queue = q.name
                                     AND s.at > $3::timestamptz - least(c.rate_period, 3155760000000000) * interval '1 microsecond')))
           END AS allow
    FROM unnest($1::text[]) WITH ORDINALITY AS q(name, n)
    -- LIMIT 1 keeps the lookup a probe of the primary key per queue,
    -- whatever the statistics of this small table say.
    LEFT JOIN LATERAL (
        SELECT * FROM {schema}.queue_controls AS qc WHERE qc.queue = q.name LIMIT 1
    ) AS c ON true
),
picked AS (
    (SELECT b.id, b.state, b.flow
     FROM ctl
     CROSS JOIN LATERAL (
         SELECT jc.id, jc.priority, jc.run_at, jc.state, jc.flow FROM {schema}.jobs AS jc
         WHERE jc.queue = ctl.name
           AND jc.state IN ('pending', 'scheduled') AND jc.key IS NULL
           AND (jc.state = 'pending' OR jc.run_at <= $3)
         ORDER BY jc.priority DESC, jc.run_at, jc.id
         LIMIT ctl.allow
         FOR UPDATE SKIP LOCKED
     ) AS b
     WHERE cardinality($8::text[]) = 0
     ORDER BY b.priority DESC, b.run_at, b.id
     LIMIT $2)
    UNION ALL
    SELECT k.id, k.state, k.flow
    FROM {schema}.jq_claim_keyed($1::text[], ARRAY(SELECT ctl.allow::int4 FROM ctl ORDER BY ctl.n), $2::int4,
                                 $3::timestamptz, $8::text[]) AS k
    WHERE cardinality($8::text[]) > 0
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
started AS (
    INSERT INTO {schema}.queue_starts (queue, at, n)
    SELECT cl.queue, $3, count(*) FROM claimed AS cl JOIN ctl ON ctl.name = cl.queue AND ctl.rated
    GROUP BY cl.queue
),
forgotten AS (
    -- The asked queues' rows of the log (one per claim in the window, and
    -- those that left it), from queue_starts_window. The window's count
    -- above never depends on this delete: the log only has to keep up.
    DELETE FROM {schema}.queue_starts AS s
    WHERE s.queue = ANY ($1::text[])
      AND s.at <= (SELECT ctl.window_after FROM ctl WHERE ctl.name = s.queue AND ctl.rated LIMIT 1)
),
seen AS (
    INSERT INTO {schema}.queue_seen (queue, worker, seen_at, paused)
    SELECT ctl.name, $4, $3, ctl.paused FROM ctl WHERE ctl.controlled
    ON CONFLICT (queue, worker) DO UPDATE SET seen_at = excluded.seen_at, paused = excluded.paused
),
unseen AS (
    -- Claimers whose latest claim of an asked controlled queue was at or
    -- before $7 (a day ago): pools long gone must not pile up. Never $4's
    -- row, which `seen` writes in this statement.
    DELETE FROM {schema}.queue_seen AS u
    WHERE u.queue = ANY ($1::text[]) AND u.seen_at <= $7 AND u.worker <> $4
),
stepped AS (
    SELECT {schema}.jq_flow_moved(array_agg(id ORDER BY id), array_agg(state ORDER BY id), array_agg('running'::text),
                                  array_agg(flow ORDER BY id), $3, NULL) AS moved
    FROM picked
    WHERE flow & 2 <> 0 AND state <> 'pending'
    HAVING count(*) > 0
),
held AS (
    -- A short claim's report (claim.rs, ClaimAnswer::limited), one row per
    -- asked queue not paused: whether it has a concurrency limit at all
    -- (not whether it is full: a slot an ack frees while this runs would
    -- be missed, and the pool sleep its poll interval beside it; with jobs
    -- left, a limit held them back or a slot just freed, and either way
    -- the pool claims again soon), when its full rate window has room
    -- again (the oldest start in the window, this claim's included, plus
    -- the period; NULL when not full or no rate), and whether it still
    -- holds a claimable keyed job (jobs_keyed) and a claimable plain one
    -- (jobs_claim) besides those this claim took. A keyed job left when
    -- the queue's own limits are not full was held back by its key's
    -- limits: keyed claims of a queue run one at a time (control_lock.sql).
    SELECT ctl.name, ctl.concurrency_limited,
           CASE WHEN ctl.rated THEN (
               SELECT CASE WHEN coalesce(sum(s.n), 0) + (SELECT count(*) FROM claimed AS cl WHERE cl.queue = ctl.name)
                                >= ctl.rate_limit
                           THEN coalesce(min(s.at), $3::timestamptz) + ctl.period END
               FROM {schema}.queue_starts AS s
               WHERE s.queue = ctl.name AND s.at > ctl.window_after)
           END AS rate_until,
           EXISTS (SELECT 1 FROM {schema}.jobs AS k
                   WHERE k.queue = ctl.name AND k.key IS NOT NULL AND k.state IN ('pending', 'scheduled')
                     AND (k.state = 'pending' OR k.run_at <= $3)
                     AND k.id <> ALL (ARRAY(SELECT p.id FROM picked AS p))) AS keyed_left,
           EXISTS (SELECT 1 FROM {schema}.jobs AS l
                   WHERE l.queue = ctl.name AND l.key IS NULL AND l.state IN ('pending', 'scheduled')
                     AND (l.state = 'pending' OR l.run_at <= $3)
                     AND l.id <> ALL (ARRAY(SELECT p.id FROM picked AS p))) AS plain_left
    FROM ctl
    WHERE NOT ctl.paused AND (SELECT count(*) FROM claimed) < $2::int4
)
-- The filter only makes `stepped` run (a SELECT CTE runs when read).
SELECT claimed.*, NULL::text AS held, NULL::bool AS concurrency_limited, NULL::timestamptz AS rate_until,
       NULL::bool AS keyed_left, NULL::bool AS plain_left
FROM claimed WHERE (SELECT count(*) FROM stepped) >= 0
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       NULL, NULL, NULL, NULL, NULL, held.name, held.concurrency_limited, held.rate_until, held.keyed_left,
       held.plain_left
FROM held
