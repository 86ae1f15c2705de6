-- Extends the lease of job ?1 held with token ?2 to ?3. An expired but not
-- yet recovered lease may still be extended.
UPDATE jobs SET lease_expires_at = ?3
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
