-- One job by id ?1, in the column order of row.rs.
SELECT id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at,
       finished_at, lease_token, lease_worker, lease_expires_at, errors, unique_key, trace,
       timeout_ms, cancel_requested_at, cancel_reason, progress, key
FROM jobs WHERE id = ?1
