-- Job ?1's wait is over.
DELETE FROM waits WHERE job_id = ?1
