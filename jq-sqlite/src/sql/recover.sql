-- Running jobs whose lease expired (lease_expires_at <= ?1, now) record a
-- "lease expired" error and go back to Pending, or to Dead when no attempt
-- is left. One statement: the guard is evaluated atomically with the write,
-- so a job a concurrent ack just completed is never touched.
UPDATE jobs
SET errors = json_insert(errors, '$[#]', json_object('attempt', attempts, 'at', ?1, 'message',
        'lease expired (worker ' || coalesce(lease_worker, '') || ' did not finish or heartbeat in time)')),
    state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
    finished_at = CASE WHEN attempts >= max_attempts THEN ?1 ELSE NULL END,
    run_at = CASE WHEN attempts >= max_attempts THEN run_at ELSE ?1 END,
    lease_token = NULL, lease_worker = NULL, lease_expires_at = NULL
WHERE state = 'running' AND lease_expires_at <= ?1
