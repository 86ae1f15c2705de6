-- One page of jobs by ascending id; a NULL filter matches everything.
-- $1 queue text, $2 state text, $3 kind text, $4 after uuid, $5 limit int8.
SELECT {columns}
FROM {schema}.jobs AS j
WHERE ($1::text IS NULL OR j.queue = $1::text)
  AND ($2::text IS NULL OR j.state = $2::text)
  AND ($3::text IS NULL OR j.kind = $3::text)
  AND ($4::uuid IS NULL OR j.id > $4::uuid)
ORDER BY j.id
LIMIT $5
