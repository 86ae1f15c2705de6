-- Waiting, Scheduled or Pending -> Cancelled (a Waiting job's dependents
-- follow by migration 12's trigger). $1 id uuid, $2 now timestamptz.
-- No row returned: unknown id or another state (the caller looks it up).
--
-- The row is found by primary key and locked first, then changed by its
-- ctid: `id = $1 AND state IN ('scheduled', 'pending')` in one WHERE would
-- also match the claim index's predicate, and a plan built on statistics
-- that saw no claimable job walks that whole index instead (see migration
-- 3). The state guard is evaluated on the locked, latest row version.
-- The job is counted in job_counts (migration 8).
WITH target AS (
    SELECT ctid FROM {schema}.jobs WHERE id = $1 FOR UPDATE
),
upd AS (
UPDATE {schema}.jobs AS j
SET state = 'cancelled', finished_at = $2
FROM target
WHERE j.ctid = target.ctid AND j.state IN ('waiting', 'scheduled', 'pending')
RETURNING j.id, j.queue, j.state
),
counted AS (
INSERT INTO {schema}.job_counts AS c (queue, state, shard, n)
SELECT queue, state, (SELECT floor(random() * 16)::int2), count(*)
FROM upd
GROUP BY queue, state
ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n
)
SELECT id FROM upd
