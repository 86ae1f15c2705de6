-- Pauses queue $1 at $2 (keeping an earlier pause's instant) or, with $2
-- NULL, resumes it; a resume NOTIFYs channel $3 so that idle workers
-- claim at once.
WITH up AS (
    INSERT INTO {schema}.queue_controls AS c (queue, paused_at) VALUES ($1, $2)
    ON CONFLICT (queue) DO UPDATE
    SET paused_at = CASE WHEN $2::timestamptz IS NULL THEN NULL ELSE coalesce(c.paused_at, $2) END
    RETURNING c.queue, c.paused_at, c.concurrency, c.rate_limit
)
SELECT pg_notify($3, '') FROM up WHERE up.paused_at IS NULL
