-- Job $1's result: one row when the job exists, its result NULL when none.
SELECT r.result FROM {schema}.jobs AS j LEFT JOIN {schema}.job_results AS r ON r.id = j.id WHERE j.id = $1
