-- Cancels job ?1 if it has not started: Scheduled or Pending -> Cancelled at ?2.
UPDATE jobs SET state = 'cancelled', finished_at = ?2
WHERE id = ?1 AND state IN ('scheduled', 'pending')
RETURNING queue
