-- The signals of job ?1 not taken yet, oldest first.
SELECT name, sent_at FROM signals WHERE job_id = ?1 ORDER BY seq
