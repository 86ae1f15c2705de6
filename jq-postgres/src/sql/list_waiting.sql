-- One page of one queue's Pending or Scheduled jobs of any kind by
-- ascending id: the list of a waiting state with a queue and no kind
-- (list_waiting_kind.sql has a kind; list.sql every other shape).
-- $1 queue text, $2 state text ('pending' or 'scheduled'), $3 after uuid
-- (NULL: from the start), $4 limit int8.
--
-- The page's ids come from jobs_claim alone (the waiting jobs only; queue
-- its first column, state included: an index-only scan), kept in a bounded
-- sort; only the page's rows are then read. Reading every waiting job's row
-- to sort them made the dashboard's overview slow on a deep queue, in
-- proportion to its pending jobs. list.sql would walk the primary key,
-- passing every finished job older than the queue's first waiting one
-- (millions, in a store that kept its history).
SELECT {columns}
FROM {schema}.jobs AS j
WHERE j.id IN (
    SELECT u.id FROM (
        (SELECT w.id
         FROM {schema}.jobs AS w
         WHERE w.state IN ('pending', 'scheduled') AND w.key IS NULL
           AND w.queue = $1::text
           AND w.state = $2::text
           AND w.id > coalesce($3::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
         ORDER BY w.id
         LIMIT $4)
        UNION ALL
        -- The keyed ones from jobs_keyed.
        (SELECT w.id
         FROM {schema}.jobs AS w
         WHERE w.key IS NOT NULL AND w.state IN ('pending', 'scheduled')
           AND w.queue = $1::text
           AND w.state = $2::text
           AND w.id > coalesce($3::uuid, '00000000-0000-0000-0000-000000000000'::uuid)
         ORDER BY w.id
         LIMIT $4)
    ) AS u
    ORDER BY u.id
    LIMIT $4
)
ORDER BY j.id
