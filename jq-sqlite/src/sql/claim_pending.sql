-- Pending jobs of queue ?1 in claim order (jobs_pending index, no sort);
-- the caller stops stepping at its limit. (A `LIMIT ?` would make SQLite
-- re-prepare the statement at every call: the planner looks at the value.)
-- Each whole row, in the column order of row.rs, then its flow and rowid:
-- a Pending candidate is nearly always taken (the drain takes them all),
-- and reading it here spares a second statement per claimed job
-- (claim_row.sql; about 5% of the drain's instructions, BENCHMARKS.md
-- session 22). The take changes only what the caller knows.
SELECT id, queue, kind, payload, priority, state, attempts, max_attempts, run_at, created_at,
       finished_at, lease_token, lease_worker, lease_expires_at, errors, unique_key, trace,
       timeout_ms, cancel_requested_at, cancel_reason, progress, flow, seq
FROM jobs
WHERE queue = ?1 AND state = 'pending'
ORDER BY priority DESC, run_at, id
