-- A purged job's waits rows go with it (job ?1).
DELETE FROM waits WHERE job_id = ?1
