-- One page of one queue's Pending or Scheduled jobs by ascending id: the
-- list of a waiting state with a queue (list.sql has every other shape).
-- $1 queue text, $2 state text ('pending' or 'scheduled'), $3 kind text
-- (NULL: any), $4 after uuid (NULL: from the start), $5 limit int8.
--
-- Reads the queue's entries of jobs_claim (the waiting jobs only) and
-- keeps the first $5 by id (a bounded sort: tens of milliseconds for
-- 100,000 waiting jobs). list.sql would walk the primary key, passing
-- every finished job older than the queue's first waiting one (millions,
-- in a store that kept its history) before the first row it returns.
SELECT {columns}
FROM {schema}.jobs AS j
WHERE j.state IN ('pending', 'scheduled')
  AND j.queue = $1::text
  AND j.state = $2::text
  AND ($3::text IS NULL OR j.kind = $3::text)
  AND j.id > coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
ORDER BY j.id
LIMIT $5
