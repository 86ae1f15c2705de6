-- Every periodic job row, by name.
SELECT name, queue, spec, zone, cursor, last_job, missed, last_missed, declared_at, run_requested
FROM schedules ORDER BY name
