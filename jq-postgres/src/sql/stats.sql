-- Job counts by queue and state, whatever the number of finished jobs:
-- finished states from job_counts (their shards summed; migration 8), live
-- states from the jobs themselves through the partial indexes that hold
-- only live jobs (jobs_claim: Pending and Scheduled; jobs_lease_expiry:
-- Running). A row whose state jq does not know but holds a lease comes
-- back with it, and the caller logs it.
SELECT queue, state, sum(n)::int8 AS n
FROM {schema}.job_counts
GROUP BY queue, state
HAVING sum(n) <> 0
UNION ALL
SELECT queue, state, count(*) AS n
FROM {schema}.jobs
WHERE state IN ('pending', 'scheduled') OR lease_expires_at IS NOT NULL
GROUP BY queue, state
