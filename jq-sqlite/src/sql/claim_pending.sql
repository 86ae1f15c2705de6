-- Pending jobs of queue ?1 in claim order (jobs_pending index, no sort);
-- the caller stops stepping at its limit. (A `LIMIT ?` would make SQLite
-- re-prepare the statement at every call: the planner looks at the value.)
SELECT seq, id, priority, run_at FROM jobs
WHERE queue = ?1 AND state = 'pending'
ORDER BY priority DESC, run_at, id
