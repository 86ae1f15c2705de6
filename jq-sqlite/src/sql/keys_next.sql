-- The rotation's step (claim.rs, rotation.rs): the first keyed job of
-- queue ?1 and priority ?2 whose key is after ?3 in byte order, in the
-- order (key, run_at, id): the next key's head, in one seek of
-- jobs_keyed. Its state, for the counts of a workflow step it may be.
SELECT key, seq, id, run_at, state FROM jobs INDEXED BY jobs_keyed
WHERE key IS NOT NULL AND (state = 'pending' OR state = 'scheduled') AND queue = ?1 AND priority = ?2
  AND key > ?3
ORDER BY key, run_at, id
LIMIT 1
