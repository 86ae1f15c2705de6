-- Extends the lease of job ?1 held with token ?2 to ?3. An expired but not
-- yet recovered lease may still be extended. Answers whether the job holds
-- a cancel request (no row: the lease is lost). The heartbeat runs about
-- once a second per pool, so RETURNING's cost does not reach the drain.
UPDATE jobs SET lease_expires_at = ?3
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
RETURNING cancel_requested_at IS NOT NULL
