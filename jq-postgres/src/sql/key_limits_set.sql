-- Sets the limits of key $2 of queue $1 ('' for the queue's default, which
-- every key without an override follows; migration 15): concurrency $3,
-- rate $4 starts per $5 µs (NULL: no such limit; all NULL: unlimited), and
-- NOTIFYs channel $6 (a raised limit may make jobs claimable).
WITH up AS (
    INSERT INTO {schema}.key_limits AS l (queue, key, concurrency, rate_limit, rate_period) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (queue, key) DO UPDATE SET concurrency = $3, rate_limit = $4, rate_period = $5
    RETURNING l.queue
)
SELECT pg_notify($6, '') FROM up
