-- The job ids of workflow $1, in step order (a resent workflow's answer).
SELECT id FROM {schema}.job_nodes WHERE workflow = $1 ORDER BY position
