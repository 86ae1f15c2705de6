-- Schema version 10: each workflow's counts per state, kept in the
-- writer's transaction of every change of one of its jobs, so that
-- `workflow(id)` reads one row instead of every job of the workflow.
--
-- The workflow's enqueue writes its row (workflow.rs); every later change
-- of a step's state or its purge adjusts it by the triggers below, in the
-- statement that makes the change: claim, settle, recover, promote,
-- cancel, retry, the release and cancellation of children, purge, with no
-- code of their own. Their WHEN clause is false for a job outside a
-- workflow (`flow` bit 2), and a trigger whose WHEN is false costs an
-- update nothing measurable (BENCHMARKS.md, session 16): the drain of
-- plain jobs does not pay for it. A step pays one row update per change of
-- state, on a row the writer alone writes.
CREATE TABLE workflow_counts (
    workflow  BLOB    PRIMARY KEY,
    scheduled INTEGER NOT NULL DEFAULT 0,
    pending   INTEGER NOT NULL DEFAULT 0,
    running   INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    dead      INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    waiting   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The workflows stored before this version, counted once (this runs in
-- the migration's BEGIN IMMEDIATE: no other writer changes a job meanwhile).
INSERT INTO workflow_counts (workflow, scheduled, pending, running, completed, dead, cancelled, waiting)
SELECT w.id,
       count(*) FILTER (WHERE j.state = 'scheduled'),
       count(*) FILTER (WHERE j.state = 'pending'),
       count(*) FILTER (WHERE j.state = 'running'),
       count(*) FILTER (WHERE j.state = 'completed'),
       count(*) FILTER (WHERE j.state = 'dead'),
       count(*) FILTER (WHERE j.state = 'cancelled'),
       count(*) FILTER (WHERE j.state = 'waiting')
FROM workflows w
LEFT JOIN job_nodes n ON n.workflow = w.id
LEFT JOIN jobs j ON j.id = n.id
GROUP BY w.id;

CREATE TRIGGER workflow_counts_state AFTER UPDATE OF state ON jobs
WHEN (NEW.flow & 2) <> 0 AND OLD.state <> NEW.state
BEGIN
    UPDATE workflow_counts
    SET scheduled = scheduled + (NEW.state = 'scheduled') - (OLD.state = 'scheduled'),
        pending = pending + (NEW.state = 'pending') - (OLD.state = 'pending'),
        running = running + (NEW.state = 'running') - (OLD.state = 'running'),
        completed = completed + (NEW.state = 'completed') - (OLD.state = 'completed'),
        dead = dead + (NEW.state = 'dead') - (OLD.state = 'dead'),
        cancelled = cancelled + (NEW.state = 'cancelled') - (OLD.state = 'cancelled'),
        waiting = waiting + (NEW.state = 'waiting') - (OLD.state = 'waiting')
    WHERE workflow = (SELECT workflow FROM job_nodes WHERE id = NEW.id);
END;

-- A purged step leaves the counts. Its node is deleted after the job, in
-- the same transaction (maintenance.rs), so it still names the workflow.
CREATE TRIGGER workflow_counts_purge AFTER DELETE ON jobs
WHEN (OLD.flow & 2) <> 0
BEGIN
    UPDATE workflow_counts
    SET scheduled = scheduled - (OLD.state = 'scheduled'),
        pending = pending - (OLD.state = 'pending'),
        running = running - (OLD.state = 'running'),
        completed = completed - (OLD.state = 'completed'),
        dead = dead - (OLD.state = 'dead'),
        cancelled = cancelled - (OLD.state = 'cancelled'),
        waiting = waiting - (OLD.state = 'waiting')
    WHERE workflow = (SELECT workflow FROM job_nodes WHERE id = OLD.id);
END;
