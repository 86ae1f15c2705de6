-- What a claim reads of queue ?1 before it walks it, in one statement:
-- whether it has a control, then its paused_at, concurrency, rate_limit,
-- rate_period (NULLs without one); last, the highest priority at which it
-- holds a keyed job waiting to run (NULL: none), the first entry of
-- jobs_keyed_waiting for the queue. Read by every claim, per
-- asked queue: the keyed probe costs a claim over plain queues one index
-- seek, and no statement of its own (rotation.rs).
SELECT c.queue IS NOT NULL, c.paused_at, c.concurrency, c.rate_limit, c.rate_period,
       (SELECT k.priority FROM jobs AS k INDEXED BY jobs_keyed_waiting
        WHERE k.keyed_wait IS NOT NULL AND k.queue = ?1 ORDER BY k.priority DESC LIMIT 1)
FROM (SELECT 1) LEFT JOIN queue_controls AS c ON c.queue = ?1
