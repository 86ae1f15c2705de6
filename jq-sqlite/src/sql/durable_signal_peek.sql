-- The payload of the oldest signal ?2 of job ?1, if any.
SELECT payload FROM signals WHERE job_id = ?1 AND name = ?2 ORDER BY seq LIMIT 1
