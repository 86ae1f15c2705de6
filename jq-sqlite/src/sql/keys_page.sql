-- keys_page_limits.sql for a queue where no key has limits of its own
-- (keys_defaults.sql): the same rows and columns, the key's own limits
-- always none, and no lookup of them per row.
SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.state, j.attempts, j.max_attempts, j.run_at,
       j.created_at, j.finished_at, j.lease_token, j.lease_worker, j.lease_expires_at, j.errors,
       j.unique_key, j.trace, j.timeout_ms, j.cancel_requested_at, j.cancel_reason, j.progress, j.key, j.flow,
       j.seq,
       CASE WHEN j.flow & 2 <> 0 THEN (SELECT n.workflow FROM job_nodes AS n WHERE n.id = j.id) END,
       0, NULL, NULL, NULL
FROM jobs AS j INDEXED BY jobs_keyed_waiting
WHERE j.keyed_wait IS NOT NULL AND j.queue = ?1 AND j.priority = ?2 AND j.key > ?3
  AND (j.state = 'pending' OR j.state = 'scheduled')
ORDER BY j.key, j.run_at, j.id
