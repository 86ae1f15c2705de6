-- The journal entry of job $1 at index $2.
SELECT idx, name, kind, value, until, at FROM {schema}.journal WHERE job_id = $1 AND idx = $2
