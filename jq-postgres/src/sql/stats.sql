-- Job counts by queue and state, whatever the number of finished jobs:
-- finished states from job_counts (their shards summed),
-- Pending and Scheduled from jobs_claim alone (queue its first column,
-- state included), Waiting from jobs_waiting_on_parents, Running from jobs_lease_expiry (a lease is held exactly
-- while Running). A leased row whose state jq does not know
-- comes back with it, and the caller logs it.
SELECT queue, state, sum(n)::int8 AS n
FROM {schema}.job_counts
GROUP BY queue, state
HAVING sum(n) <> 0
UNION ALL
SELECT w.queue, w.state, sum(w.n)::int8 AS n
FROM (
    SELECT queue, state, count(*) AS n
    FROM {schema}.jobs
    WHERE state IN ('pending', 'scheduled') AND key IS NULL
    GROUP BY queue, state
    UNION ALL
    -- The keyed ones from jobs_keyed.
    SELECT queue, state, count(*) AS n
    FROM {schema}.jobs
    WHERE key IS NOT NULL AND state IN ('pending', 'scheduled')
    GROUP BY queue, state
) AS w
GROUP BY w.queue, w.state
UNION ALL
SELECT queue, 'waiting' AS state, count(*) AS n
FROM {schema}.jobs
WHERE state = 'waiting'
GROUP BY queue
UNION ALL
SELECT queue, state, count(*) AS n
FROM {schema}.jobs
WHERE lease_expires_at IS NOT NULL
GROUP BY queue, state
