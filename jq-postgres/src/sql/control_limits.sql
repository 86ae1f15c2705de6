-- Sets queue $1's limits: concurrency $2, rate $3 starts per $4 µs (NULL:
-- no such limit), and NOTIFYs
-- channel $5 (a raised limit may make jobs claimable).
WITH up AS (
    INSERT INTO {schema}.queue_controls AS c (queue, concurrency, rate_limit, rate_period) VALUES ($1, $2, $3, $4)
    ON CONFLICT (queue) DO UPDATE SET concurrency = $2, rate_limit = $3, rate_period = $4
    RETURNING c.queue, c.paused_at, c.concurrency, c.rate_limit
)
SELECT pg_notify($5, '') FROM up
