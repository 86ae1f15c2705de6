-- The first statement of a claim over a controlled queue, or one with
-- keyed jobs: locks the controls of the asked queues $1 text[] (in name
-- order, so two claims never deadlock), then takes a transaction-level
-- advisory lock on (schema, queue) for each asked queue with keyed waiting
-- jobs (one probe of jobs_keyed per queue; in name order too), so that the
-- claim statement after it, with a snapshot taken once the locks are
-- held, counts everything earlier claims of these queues committed. Keyed
-- claims of one queue thus run one at a time: the rotation's cursors and
-- each key's Running jobs and starts are read after the earlier claim
-- committed, and no key's limits are exceeded (jq_claim_keyed). Returns the controlled queues (keyed false), then the
-- queues locked for their keyed jobs (keyed true). The branches of a UNION
-- ALL run in the order written: the controls are locked first.
WITH locked AS (
    SELECT queue FROM {schema}.queue_controls WHERE queue = ANY($1::text[]) ORDER BY queue FOR UPDATE
)
SELECT locked.queue, false AS keyed FROM locked
UNION ALL
SELECT s.name, pg_advisory_xact_lock(hashtextextended('jq-keys:{schema}:' || s.name, 0)) IS NOT NULL
FROM (
    SELECT q.name FROM unnest($1::text[]) AS q(name)
    -- LIMIT 1 in a LATERAL keeps it one probe of jobs_keyed per queue.
    CROSS JOIN LATERAL (
        SELECT 1 FROM {schema}.jobs AS jk
        WHERE jk.queue = q.name AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
        LIMIT 1
    ) AS probe
    ORDER BY q.name
    -- Not pulled up: the locks are taken in this order.
    OFFSET 0
) AS s
