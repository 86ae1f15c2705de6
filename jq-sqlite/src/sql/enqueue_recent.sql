-- The jobs of queue ?1 with unique key ?2 created after ?3, in any state,
-- for a unique period (jobs_unique_created): (id, state, created_at).
SELECT id, state, created_at FROM jobs
WHERE queue = ?1 AND unique_key = ?2 AND unique_key IS NOT NULL AND created_at > ?3
ORDER BY id
