-- The workflows of the due Scheduled steps (run_at <= ?1, now) that
-- promote.sql is about to make Pending, with how many of each, for their
-- workflows' counts (workflow_counts). Read in the same
-- transaction, right before it, through the same jobs_due index: only the
-- rows that statement updates, and a node only for the steps among them.
-- promote.sql itself has no RETURNING, which plain jobs would pay for.
-- CROSS JOIN: SQLite keeps this join order, the due rows outside.
SELECT n.workflow, count(*) FROM jobs j INDEXED BY jobs_due CROSS JOIN job_nodes n ON n.id = j.id
WHERE j.state = 'scheduled' AND j.run_at <= ?1 AND j.flow & 2 <> 0
GROUP BY n.workflow
