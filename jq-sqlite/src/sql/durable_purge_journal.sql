-- A purged job's journal rows go with it (job ?1).
DELETE FROM journal WHERE job_id = ?1
