-- How many entries job $1's journal holds, and their bytes.
SELECT count(*)::bigint, coalesce(sum(bytes), 0)::bigint FROM {schema}.journal WHERE job_id = $1
