-- Store the progress of jobs while their lease is held
-- (CancelStorage::progress). $1 ids uuid[], $2 tokens uuid[], $3 values
-- text[] (checked JSON). Returns the ids stored; the caller reports the
-- others as stale.
UPDATE {schema}.jobs AS j
SET progress = t.progress
FROM unnest($1::uuid[], $2::uuid[], $3::text[]) AS t(id, token, progress)
WHERE j.id = t.id AND j.state = 'running' AND j.lease_token = t.token
RETURNING j.id
