-- Takes one keyed candidate (rowid ?1) as claim_take.sql takes a plain
-- one (?2 token, ?3 worker, ?4 expires_at), and clears its marker
-- (keyed_wait): it no longer waits. Only keyed jobs come here, so only they pay
-- the cursor of jobs_keyed_waiting this opens.
UPDATE jobs
SET state = 'running', attempts = attempts + 1,
    lease_token = ?2, lease_worker = ?3, lease_expires_at = ?4, keyed_wait = NULL
WHERE seq = ?1 AND (state = 'pending' OR state = 'scheduled')
