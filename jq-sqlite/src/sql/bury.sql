-- Sends a job whose row cannot be decoded to Dead with the reason, instead
-- of handing it to a worker, blocking its queue, or leaving it Running: a
-- claim that just took it, or recover when its lease expired. ?1 rowid,
-- ?2 now, ?3 message. Any column may be the corrupt one, so none of them
-- may make this statement fail: an error history that is not JSON is
-- restarted, an attempt count that is not an integer is recorded as 0.
-- Returns the queue (job_counts) and the stored id (the caller looks for
-- the job's node: a corrupt step still counts in its workflow).
UPDATE jobs
SET state = 'dead', finished_at = ?2, lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL,
    -- CASE, not AND: SQLite may evaluate both sides of an AND, and
    -- json_type of text that is not JSON is an error.
    errors = json_insert(CASE WHEN NOT json_valid(errors) THEN '[]'
                              WHEN json_type(errors) = 'array' THEN errors ELSE '[]' END, '$[#]',
                         json_object('attempt', CASE WHEN typeof(attempts) = 'integer' THEN attempts ELSE 0 END,
                                     'at', ?2, 'message', ?3))
WHERE seq = ?1 AND state = 'running'
RETURNING queue, id
