-- A signal for the wait of Scheduled job ?1: Pending now (?2). A keyed
-- job keeps its marker (keyed_wait), as promote does. Returns its flow.
UPDATE jobs SET state = 'pending', run_at = ?2 WHERE id = ?1 AND state = 'scheduled'
RETURNING flow
