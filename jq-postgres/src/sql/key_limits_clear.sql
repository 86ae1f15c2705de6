-- Removes key $2's override in queue $1 (migration 15): the key follows
-- the queue's default again. NOTIFYs channel $3 when there was one.
WITH gone AS (
    DELETE FROM {schema}.key_limits AS l WHERE l.queue = $1 AND l.key = $2 AND l.key <> ''
    RETURNING l.key
)
SELECT pg_notify($3, '') FROM gone
