-- Cancel job $1 whatever its state (CancelStorage::request_cancel). $2 now
-- timestamptz, $3 reason text.
--
-- Scheduled or Pending -> Cancelled (counted in job_counts, migration 8);
-- Running: the request is stored (migration 9) unless one is (a resend
-- keeps the first); other states are left alone. Returns the state the job
-- had, read from the locked latest row version; no row: unknown id.
-- The row is found by primary key and locked first, then changed by its
-- ctid, as in cancel.sql (a WHERE that matches the claim index's predicate
-- could walk that index instead).
WITH target AS (
    SELECT ctid, state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
),
upd AS (
UPDATE {schema}.jobs AS j
SET state = CASE WHEN j.state = 'running' THEN j.state ELSE 'cancelled' END,
    finished_at = CASE WHEN j.state = 'running' THEN j.finished_at ELSE $2 END,
    cancel_requested_at = CASE WHEN j.state = 'running' THEN coalesce(j.cancel_requested_at, $2)
        ELSE j.cancel_requested_at END,
    cancel_reason = CASE WHEN j.state = 'running' AND j.cancel_requested_at IS NULL THEN $3
        ELSE j.cancel_reason END
FROM target
WHERE j.ctid = target.ctid AND j.state IN ('scheduled', 'pending', 'running')
RETURNING j.queue, j.state
),
counted AS (
INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
SELECT queue, state, (SELECT floor(random() * 16)::int2), count(*)
FROM upd
WHERE state = 'cancelled'
GROUP BY queue, state
ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n
)
SELECT state FROM target
