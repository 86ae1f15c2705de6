-- The Running jobs with an expired lease (?1, now) that recover.sql left
-- alone because their row is corrupt, in the column order of row.rs, then
-- the rowid. Read right after recover.sql in the same transaction, so
-- every row found is one that statement could not update.
SELECT id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at,
       finished_at, lease_token, lease_worker, lease_expires_at, errors, unique_key, trace,
       timeout_ms, cancel_requested_at, cancel_reason, progress, key, seq
FROM jobs WHERE state = 'running' AND lease_expires_at <= ?1
