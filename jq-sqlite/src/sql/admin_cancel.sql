-- Cancels job ?1 if it has not started: Waiting, Scheduled or Pending ->
-- Cancelled at ?2. admin.rs reads the old state first (RETURNING sees
-- the new row): a Waiting job leaves the Waiting count. A keyed job stops
-- waiting: its marker goes (keyed_wait).
UPDATE jobs SET state = 'cancelled', finished_at = ?2, keyed_wait = NULL
WHERE id = ?1 AND state IN ('waiting', 'scheduled', 'pending')
RETURNING queue, flow
