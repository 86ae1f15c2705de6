-- How many signals job ?1 holds that no wait has taken yet (MAX_SIGNALS
-- bounds it; the signals_job index counts them).
SELECT count(*) FROM signals WHERE job_id = ?1
