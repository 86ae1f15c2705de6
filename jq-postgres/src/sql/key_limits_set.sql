-- Sets the limits of key $2 of queue $1 ('' for the queue's default, which
-- every key without an override follows): concurrency $3,
-- rate $4 starts per $5 µs (NULL: no such limit; all NULL: unlimited), and
-- NOTIFYs channel $6 (a raised limit may make jobs claimable).
--
-- Limits without a rate forget the start log of the keys that follow them
-- (the key itself; for the default, every key without an override that
-- has a rate): starts are logged only while a key's limits have a rate,
-- and a rate set later counts from then, as in the model.
WITH up AS (
    INSERT INTO {schema}.key_limits AS l (queue, key, concurrency, rate_limit, rate_period) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (queue, key) DO UPDATE SET concurrency = $3, rate_limit = $4, rate_period = $5
    RETURNING l.queue
),
forgotten AS (
    DELETE FROM {schema}.key_starts AS s
    WHERE s.queue = $1 AND $4::int4 IS NULL
      AND (s.key = $2
           OR ($2 = '' AND NOT EXISTS (SELECT 1 FROM {schema}.key_limits AS o
                                       WHERE o.queue = $1 AND o.key = s.key AND o.rate_limit IS NOT NULL)))
)
SELECT pg_notify($6, '') FROM up
