-- How many signals job $1 holds that no wait has taken yet (MAX_SIGNALS
-- bounds it; counted under the job's row lock, so two senders cannot both
-- take the last place).
SELECT count(*)::bigint FROM {schema}.signals WHERE job_id = $1
