-- Queue $1's $2 busiest keys: per key its Running jobs
-- (jobs_key_running) and its Pending and Scheduled ones (jobs_keyed), by
-- their sum descending, then key (bytes). Reads every live keyed job of
-- the queue, never a finished one.
SELECT k.key, sum(k.running)::int8 AS running, sum(k.pending)::int8 AS pending
FROM (
    SELECT r.key, count(*) AS running, 0::int8 AS pending
    FROM {schema}.jobs AS r
    WHERE r.queue = $1 AND r.key IS NOT NULL AND r.state = 'running'
    GROUP BY r.key
    UNION ALL
    SELECT w.key, 0::int8, count(*)
    FROM {schema}.jobs AS w
    WHERE w.queue = $1 AND w.key IS NOT NULL AND w.state IN ('pending', 'scheduled')
    GROUP BY w.key
) AS k
GROUP BY k.key
ORDER BY sum(k.running) + sum(k.pending) DESC, k.key
LIMIT $2
