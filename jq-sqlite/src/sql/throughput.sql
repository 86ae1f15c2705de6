-- Jobs that reached Completed or Dead since ?1 (µs), per queue and minute.
-- The first term repeats jobs_finished's own WHERE, which SQLite must see
-- verbatim to use that partial index; then one range per state.
SELECT queue, finished_at / 60000000 AS minute,
       sum(state = 'completed') AS completed,
       sum(state = 'dead') AS dead
FROM jobs
WHERE (state = 'completed' OR state = 'dead' OR state = 'cancelled')
  AND state IN ('completed', 'dead') AND finished_at >= ?1
GROUP BY queue, minute
ORDER BY queue, minute
