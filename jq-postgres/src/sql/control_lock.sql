-- The first statement of a claim over a controlled queue: locks the
-- controls of the asked queues $1 text[] (in name order, so two claims
-- never deadlock), so that the claim statement after it, with a snapshot
-- taken once the locks are held, counts everything earlier claims of
-- these queues committed. Returns the controlled queues.
SELECT queue FROM {schema}.queue_controls WHERE queue = ANY($1::text[]) ORDER BY queue FOR UPDATE
