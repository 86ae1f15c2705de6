-- Job $1's wait is over.
DELETE FROM {schema}.waits WHERE job_id = $1
