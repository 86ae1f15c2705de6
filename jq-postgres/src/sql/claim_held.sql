-- What held back the claimable jobs a short claim over controlled or keyed
-- queues left (claim.rs, ClaimAnswer::limited), read after it committed.
--
-- $1 queues text[], $2 now timestamptz.
--
-- One row per asked queue that is not paused: whether it has a
-- concurrency limit at all (`concurrency_limited`; not whether it is
-- full: read after the claim committed, a count of its Running jobs could
-- miss a slot that an ack freed meanwhile, and the pool would then sleep
-- its poll interval beside a free slot; with jobs left, a concurrency
-- limit held them back or a slot just freed, and either way the pool
-- claims again soon), when its full rate window has room again (its
-- oldest start in the window plus the period; NULL when not full or no
-- rate), and whether it still holds a claimable keyed job (jobs_keyed) and a
-- claimable plain one (jobs_claim). A keyed job left when the queue's own
-- limits are not full was held back by its key's limits: keyed claims of
-- a queue run one at a time, so no other claim was taking it.
SELECT q.name,
       c.concurrency IS NOT NULL AS concurrency_limited,
       CASE WHEN c.rate_limit IS NOT NULL THEN (
           SELECT CASE WHEN sum(s.n) >= c.rate_limit
                       THEN min(s.at) + least(c.rate_period, 3155760000000000) * interval '1 microsecond' END
           FROM {schema}.queue_starts AS s
           WHERE s.queue = q.name
             AND s.at > $2::timestamptz - least(c.rate_period, 3155760000000000) * interval '1 microsecond')
       END AS rate_until,
       EXISTS (SELECT 1 FROM {schema}.jobs AS k
               WHERE k.queue = q.name AND k.key IS NOT NULL AND k.state IN ('pending', 'scheduled')
                 AND (k.state = 'pending' OR k.run_at <= $2)) AS keyed_left,
       EXISTS (SELECT 1 FROM {schema}.jobs AS p
               WHERE p.queue = q.name AND p.key IS NULL AND p.state IN ('pending', 'scheduled')
                 AND (p.state = 'pending' OR p.run_at <= $2)) AS plain_left
FROM unnest($1::text[]) AS q(name)
LEFT JOIN LATERAL (
    SELECT * FROM {schema}.queue_controls AS qc WHERE qc.queue = q.name LIMIT 1
) AS c ON true
WHERE c.paused_at IS NULL
