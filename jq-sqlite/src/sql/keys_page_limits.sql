-- The rotation's page (claim.rs, rotation.rs): the keyed jobs of queue ?1
-- and priority ?2 whose key is after ?3 in byte order, in the order (key,
-- run_at, id), from one seek of jobs_keyed_waiting: the
-- caller keeps each key's first row (its head) and steps over the others
-- without decoding them, and stops stepping after a few heads, or rows.
-- The state terms pass over a marker left on a job that no longer waits
-- (keyed_wait, 001_schema.sql). No LIMIT: a `LIMIT ?` would make SQLite
-- re-prepare the statement at every call (claim_pending.sql).
--
-- The whole row, as claim_pending.sql reads it (the columns of row.rs,
-- flow, seq, a step's workflow), so that a head taken needs no second
-- read (claim_row.sql); then the key's own limits (key_limits, whether it
-- has a row, and its concurrency, rate_limit, rate_period), so that a key
-- met costs no statement of its own. Only for a queue where some key has
-- limits of its own (keys_defaults.sql): keys_page.sql is this without
-- them, and spares each row read the lookup.
SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.state, j.attempts, j.max_attempts, j.run_at,
       j.created_at, j.finished_at, j.lease_token, j.lease_worker, j.lease_expires_at, j.errors,
       j.unique_key, j.trace, j.timeout_ms, j.cancel_requested_at, j.cancel_reason, j.progress, j.key, j.flow,
       j.seq,
       CASE WHEN j.flow & 2 <> 0 THEN (SELECT n.workflow FROM job_nodes AS n WHERE n.id = j.id) END,
       l.key IS NOT NULL, l.concurrency, l.rate_limit, l.rate_period
FROM jobs AS j INDEXED BY jobs_keyed_waiting
LEFT JOIN key_limits AS l ON l.queue = j.queue AND l.key = j.key
WHERE j.keyed_wait IS NOT NULL AND j.queue = ?1 AND j.priority = ?2 AND j.key > ?3
  AND (j.state = 'pending' OR j.state = 'scheduled')
ORDER BY j.key, j.run_at, j.id
