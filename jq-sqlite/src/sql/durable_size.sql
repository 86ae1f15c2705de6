-- How many entries job ?1's journal holds, and their bytes.
SELECT count(*), coalesce(sum(bytes), 0) FROM journal WHERE job_id = ?1
