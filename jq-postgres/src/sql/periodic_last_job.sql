-- Records $2 (uuid) as the last job of periodic job $1, in the step's
-- transaction after its jobs were inserted.
UPDATE {schema}.periodic_jobs SET last_job = $2 WHERE name = $1
