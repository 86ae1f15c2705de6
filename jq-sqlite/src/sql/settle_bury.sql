-- Bury, fenced on id ?1 and token ?2: records error ?4 at ?3
-- (now) and goes to Dead.
UPDATE jobs
SET errors = json_insert(errors, '$[#]', json_object('attempt', attempts, 'at', ?3, 'message', ?4)),
    state = 'dead', finished_at = ?3, lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
RETURNING queue, flow
