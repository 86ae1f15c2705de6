-- A unique rule's update of the waiting job ?1 (Scheduled or Pending; the
-- caller read it in this transaction): the new payload ?2, run_at ?3 and
-- the state ?4 that run_at gives. Nothing else of it changes.
UPDATE jobs SET payload = ?2, run_at = ?3, state = ?4
WHERE id = ?1 AND (state = 'scheduled' OR state = 'pending')
