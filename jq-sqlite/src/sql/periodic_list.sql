-- Every periodic job row, by name.
SELECT name, queue, spec, zone, cursor, last_job, missed, last_missed, declared_at, triggered_at
FROM periodic_jobs ORDER BY name
