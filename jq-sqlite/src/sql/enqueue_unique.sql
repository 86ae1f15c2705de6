-- The live job of queue ?1 with unique key ?2, if any (jobs_unique index).
-- Several are live only after an operator's retry brought back a Dead job
-- whose key a newer live job held: the smallest id answers, as on every
-- backend (ids are stored as 16 big-endian bytes, so BLOB order is id order).
SELECT id FROM jobs
WHERE queue = ?1 AND unique_key = ?2 AND unique_key IS NOT NULL
  AND (state = 'scheduled' OR state = 'pending' OR state = 'running')
ORDER BY id
LIMIT 1
