-- Release (shutdown hand-back or release), fenced on id ?1 and token ?2:
-- gives the attempt back, claimable again at ?3 (now + delay); Pending when
-- ?4 (the delay is zero) else Scheduled. No error recorded. A keyed job
-- waits again with its marker (keyed_wait).
UPDATE jobs
SET attempts = max(attempts - 1, 0), run_at = ?3,
    state = CASE WHEN ?4 THEN 'pending' ELSE 'scheduled' END,
    keyed_wait = key,
    lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
