-- Nack, fenced on id ?1 and token ?2: records error ?4 at ?3 (now)
-- for the current attempt; Dead when no attempt is left, else waits until
-- ?5 (now + delay), Pending when ?6 (the delay is zero) else Scheduled.
-- SET expressions read the old row, so `attempts` is the failed attempt.
-- A keyed job that waits again gets its marker (keyed_wait); the statement
-- sets run_at, a column of that index, so plain jobs pay no more for it.
UPDATE jobs
SET errors = json_insert(errors, '$[#]', json_object('attempt', attempts, 'at', ?3, 'message', ?4)),
    state = CASE WHEN attempts >= max_attempts THEN 'dead' WHEN ?6 THEN 'pending' ELSE 'scheduled' END,
    finished_at = CASE WHEN attempts >= max_attempts THEN ?3 ELSE NULL END,
    run_at = CASE WHEN attempts >= max_attempts THEN run_at ELSE ?5 END,
    keyed_wait = CASE WHEN attempts >= max_attempts THEN NULL ELSE key END,
    lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL
WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
RETURNING state, queue, flow
