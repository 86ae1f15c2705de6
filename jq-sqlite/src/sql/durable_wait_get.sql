-- The wait job ?1 is in.
SELECT idx, name, until FROM waits WHERE job_id = ?1
