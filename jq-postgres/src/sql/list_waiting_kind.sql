-- One page of one queue's Pending or Scheduled jobs of one kind by
-- ascending id (list_waiting.sql without a kind; list.sql every other
-- shape). $1 queue text, $2 state text ('pending' or 'scheduled'), $3 kind
-- text, $4 after uuid (NULL: from the start), $5 limit int8.
--
-- Reads the queue's entries of jobs_claim (the waiting jobs only) and
-- their rows, for the kind, and keeps the first $5 by id (a bounded sort). list.sql would walk the primary key, passing
-- every finished job older than the queue's first waiting one (millions,
-- in a store that kept its history) before the first row it returns.
-- Plain and keyed jobs are in two indexes: a page of each,
-- merged.
SELECT u.* FROM (
    (SELECT {columns}
     FROM {schema}.jobs AS j
     WHERE j.state IN ('pending', 'scheduled') AND j.key IS NULL
       AND j.queue = $1::text
       AND j.state = $2::text
       AND j.kind = $3::text
       AND j.id > coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
     ORDER BY j.id
     LIMIT $5)
    UNION ALL
    (SELECT {columns}
     FROM {schema}.jobs AS j
     WHERE j.key IS NOT NULL AND j.state IN ('pending', 'scheduled')
       AND j.queue = $1::text
       AND j.state = $2::text
       AND j.kind = $3::text
       AND j.id > coalesce($4::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
     ORDER BY j.id
     LIMIT $5)
) AS u
ORDER BY u.id
LIMIT $5
