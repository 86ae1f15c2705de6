-- Takes signal $2 of job $1 (found by durable_signal_peek.sql under the
-- job's row lock): deletes it.
DELETE FROM {schema}.signals WHERE job_id = $1 AND id = $2
