-- Stores the wait of job $1 (index $2, signal $3, timeout $4), replacing one.
INSERT INTO {schema}.waits (job_id, idx, name, until) VALUES ($1, $2, $3, $4)
ON CONFLICT (job_id) DO UPDATE SET idx = excluded.idx, name = excluded.name, until = excluded.until
