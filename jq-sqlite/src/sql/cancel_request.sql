-- Stores a cancel request on Running job ?1 at ?2 (now) with reason ?3,
-- unless one is stored already (a resend keeps the first). Returns the row
-- when the job is Running, whether or not this call stored the request.
UPDATE jobs
SET cancel_requested_at = coalesce(cancel_requested_at, ?2),
    cancel_reason = CASE WHEN cancel_requested_at IS NULL THEN ?3 ELSE cancel_reason END
WHERE id = ?1 AND state = 'running'
RETURNING 1
