-- Writes a periodic job's row as a successful step leaves it (insert for a new
-- periodic job, replace otherwise); run on the writer after the comparison in
-- the same transaction.
INSERT INTO periodic_jobs (name, queue, spec, zone, cursor, last_job, missed, last_missed, declared_at, triggered_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, NULL)
ON CONFLICT (name) DO UPDATE SET
    queue = excluded.queue, spec = excluded.spec, zone = excluded.zone, cursor = excluded.cursor,
    last_job = excluded.last_job, missed = excluded.missed, last_missed = excluded.last_missed,
    declared_at = excluded.declared_at, triggered_at = NULL
