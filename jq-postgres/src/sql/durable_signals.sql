-- The signals of job $1 not taken yet, oldest first.
SELECT name, sent_at FROM {schema}.signals WHERE job_id = $1 ORDER BY sent_at, id
