-- Sends a claimed job whose row cannot be decoded to Dead with the reason,
-- instead of handing it to a worker or blocking the queue. ?1 rowid,
-- ?2 now, ?3 message.
UPDATE jobs
SET state = 'dead', finished_at = ?2, lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL,
    errors = json_insert(CASE WHEN json_valid(errors) THEN errors ELSE '[]' END, '$[#]',
                         json_object('attempt', attempts, 'at', ?2, 'message', ?3))
WHERE seq = ?1
