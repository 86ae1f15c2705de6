-- The second statement of a claim over queues with a control or keyed
-- jobs (after control_lock.sql): among the asked queues $1 text[], those
-- with keyed waiting jobs (a probe of jobs_keyed each), each locked with a
-- transaction-level advisory lock on (schema, queue), in name order so two
-- claims never deadlock. Keyed claims of one queue then run one at a time:
-- the rotation's cursors, and each key's Running jobs and starts, are read
-- after the earlier claim committed, so no key's limits are exceeded
-- (migration 15, jq_claim_keyed). Returns the queues locked.
SELECT s.name, pg_advisory_xact_lock(hashtextextended('jq-keys:{schema}:' || s.name, 0)) IS NULL AS locked
FROM (
    SELECT q.name FROM unnest($1::text[]) AS q(name)
    -- One probe of jobs_keyed per queue (claim.sql).
    CROSS JOIN LATERAL (
        SELECT 1 FROM {schema}.jobs AS jk
        WHERE jk.queue = q.name AND jk.key IS NOT NULL AND jk.state IN ('pending', 'scheduled')
        LIMIT 1
    ) AS probe
    ORDER BY q.name
    -- Not pulled up: the locks are taken in this order.
    OFFSET 0
) AS s
