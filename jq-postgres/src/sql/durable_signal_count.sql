-- How many signals job $1 holds that no wait has taken yet (MAX_SIGNALS
-- bounds it; counted under the job's row lock, so two senders cannot both
-- take the last place). Its own statement, after the lock, not a column of
-- durable_lock.sql: a statement's snapshot predates the lock it waited
-- for, and would miss the signal of the sender it waited on.
SELECT count(*)::bigint FROM {schema}.signals WHERE job_id = $1
