-- Takes the oldest signal ?2 of job ?1: deletes it and returns its payload.
DELETE FROM signals WHERE seq = (
    SELECT seq FROM signals WHERE job_id = ?1 AND name = ?2 ORDER BY seq LIMIT 1
)
RETURNING payload
