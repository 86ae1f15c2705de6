-- A purged job's signals rows go with it (job ?1).
DELETE FROM signals WHERE job_id = ?1
