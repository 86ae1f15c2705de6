-- The live job of queue ?1 with unique key ?2, if any (jobs_unique index).
SELECT id FROM jobs
WHERE queue = ?1 AND unique_key = ?2 AND unique_key IS NOT NULL
  AND (state = 'scheduled' OR state = 'pending' OR state = 'running')
LIMIT 1
