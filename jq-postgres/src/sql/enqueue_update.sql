-- A unique rule's update of the waiting job $1: payload $2, run_at $3,
-- state $4 (Pending or Scheduled by run_at). Only while it still waits: a
-- job claimed since the holders were read is left alone (no row returned,
-- and the caller decides again). The NOTIFY when it became Pending
-- ($5 the wake-up channel).
WITH changed AS (
    UPDATE {schema}.jobs SET payload = $2::text, run_at = $3, state = $4
    WHERE id = $1 AND state IN ('scheduled', 'pending')
    RETURNING state
),
notify AS (
    SELECT pg_notify($5, '') FROM changed WHERE changed.state = 'pending'
)
SELECT (SELECT count(*) FROM changed) AS changed, (SELECT count(*) FROM notify) AS notified
