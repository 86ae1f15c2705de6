-- The holders of unique key $2 in queue $1 that a unique rule needs: the
-- live jobs (jobs_unique) and the jobs created after $3 in any state
-- (jobs_unique_created, the key's stored jobs, filtered by created_at; $3
-- is NULL for the rules other than a period). Returns (id, state,
-- created_at, priority).
SELECT j.id, j.state, j.created_at, j.priority FROM {schema}.jobs AS j
WHERE j.queue = $1 AND j.unique_key = $2 AND j.unique_key IS NOT NULL
  AND j.state IN ('scheduled', 'pending', 'running')
UNION
SELECT j.id, j.state, j.created_at, j.priority FROM {schema}.jobs AS j
WHERE j.queue = $1 AND j.unique_key = $2 AND j.unique_key IS NOT NULL AND j.created_at > $3
