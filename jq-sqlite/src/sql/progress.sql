-- Stores progress ?3 (JSON text) on job ?1 while it runs under token ?2.
UPDATE jobs SET progress = ?3
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
