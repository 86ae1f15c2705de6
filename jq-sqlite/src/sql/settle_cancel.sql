-- Cancel: Running -> Cancelled on a stored cancel request, fenced on id
-- ?1 and token ?2; ?3 now. No error recorded, no attempt given back.
UPDATE jobs
SET state = 'cancelled', finished_at = ?3, lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
RETURNING queue, flow
