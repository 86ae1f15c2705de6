-- Removes key $2's override in queue $1: the key follows
-- the queue's default again. NOTIFYs channel $3 when there was one. When
-- the default has no rate, the key's start log goes (key_limits_set.sql).
WITH gone AS (
    DELETE FROM {schema}.key_limits AS l WHERE l.queue = $1 AND l.key = $2 AND l.key <> ''
    RETURNING l.key
),
forgotten AS (
    DELETE FROM {schema}.key_starts AS s
    WHERE s.queue = $1 AND s.key = $2
      AND NOT EXISTS (SELECT 1 FROM {schema}.key_limits AS d
                      WHERE d.queue = $1 AND d.key = '' AND d.rate_limit IS NOT NULL)
)
SELECT pg_notify($3, '') FROM gone
