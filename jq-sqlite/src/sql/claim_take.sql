-- Takes one candidate (rowid ?1) with a fresh lease: ?2 token, ?3 worker,
-- ?4 expires_at. The state guard is belt and braces: candidates were chosen
-- in this same write transaction. No RETURNING: it would build a temporary
-- b-tree per call; claim_row.sql reads the row back by rowid instead.
UPDATE jobs
SET state = 'running', attempts = attempts + 1,
    lease_token = ?2, lease_worker = ?3, lease_expires_at = ?4
WHERE seq = ?1 AND (state = 'pending' OR state = 'scheduled')
