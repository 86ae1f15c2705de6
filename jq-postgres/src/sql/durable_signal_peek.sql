-- The id and payload of the oldest signal $2 of job $1, if any.
SELECT id, payload FROM {schema}.signals WHERE job_id = $1 AND name = $2 ORDER BY sent_at, id LIMIT 1
