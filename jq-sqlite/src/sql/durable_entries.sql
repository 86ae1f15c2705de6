-- Every journal entry of job ?1, by index.
SELECT idx, name, kind, value, until, at FROM journal WHERE job_id = ?1 ORDER BY idx
