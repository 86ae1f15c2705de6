-- Every claimer that met a control, by queue and worker.
SELECT queue, worker, seen_at, paused FROM {schema}.queue_seen ORDER BY queue, worker
