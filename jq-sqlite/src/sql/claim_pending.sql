-- Plain Pending jobs of queue ?1 in claim order (jobs_plain_pending index,
-- no sort; keyed jobs are the rotation's, claim.rs);
-- the caller stops stepping at its limit. (A `LIMIT ?` would make SQLite
-- re-prepare the statement at every call: the planner looks at the value.)
-- Each whole row, in the column order of row.rs, then its flow and rowid:
-- a Pending candidate is nearly always taken (the drain takes them all),
-- and reading it here spares a second statement per claimed job
-- (claim_row.sql, a measurable share of the drain's instructions). The
-- take changes only what the caller knows. Last, a
-- step's workflow (for its counts, workflow_counts): its node is probed only
-- when `flow` says it is a step (a CASE evaluates one branch), so a plain
-- job reads no other table.
SELECT j.id, j.queue, j.kind, j.payload, j.priority, j.state, j.attempts, j.max_attempts, j.run_at,
       j.created_at, j.finished_at, j.lease_token, j.lease_worker, j.lease_expires_at, j.errors,
       j.unique_key, j.trace, j.timeout_ms, j.cancel_requested_at, j.cancel_reason, j.progress, j.key, j.flow,
       j.seq,
       CASE WHEN j.flow & 2 <> 0 THEN (SELECT n.workflow FROM job_nodes AS n WHERE n.id = j.id) END
FROM jobs AS j INDEXED BY jobs_plain_pending
WHERE j.queue = ?1 AND j.state = 'pending' AND j.key IS NULL
ORDER BY j.priority DESC, j.run_at, j.id
