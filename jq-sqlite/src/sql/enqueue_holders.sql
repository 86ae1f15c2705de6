-- The live jobs of queue ?1 holding unique key ?2, for a unique rule
-- (jobs_unique): (id, state, created_at), smallest id first.
SELECT id, state, created_at FROM jobs
WHERE queue = ?1 AND unique_key = ?2 AND unique_key IS NOT NULL
  AND (state = 'scheduled' OR state = 'pending' OR state = 'running')
ORDER BY id
