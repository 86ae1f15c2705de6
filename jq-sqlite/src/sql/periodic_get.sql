-- One periodic job row by name ?1 (read inside the writer's transaction by
-- fire, which compares it with what the step expects).
SELECT name, queue, spec, zone, cursor, last_job, missed, last_missed, declared_at, triggered_at
FROM periodic_jobs WHERE name = ?1
