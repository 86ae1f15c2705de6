-- Schema version 7: counters of finished jobs, so that stats and the list
-- of queues cost the same whatever the number of finished jobs.
--
-- Before this, `stats` and `queues` grouped the whole jobs table, and a
-- dashboard refreshes both every few seconds: with ten million finished
-- jobs that is seconds per refresh. Finished jobs (Completed, Dead,
-- Cancelled) are now counted here per queue and state; live ones
-- (Scheduled, Pending, Running) are still counted from the jobs through the
-- partial indexes that hold only them (jobs_pending, jobs_scheduled,
-- jobs_lease).
--
-- Triggers keep the counts, in the statement that changes the job: every
-- writer of the file counts, whatever its build (several processes may
-- share a file, and one still running an older build during an upgrade
-- would otherwise change jobs without counting). They fire only for a
-- change of state or queue, and do work only when a finished state is
-- entered or left: a claim or a heartbeat evaluates the WHEN clause and
-- nothing more. (PostgreSQL counts in its statements instead, where a
-- trigger would cost every claim; see its migration 8.) OR chains, not
-- IN lists: see 001_jobs.sql.
CREATE TABLE job_counts (
    queue TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs
WHEN new.state = 'completed' OR new.state = 'dead' OR new.state = 'cancelled'
BEGIN
    INSERT INTO job_counts (queue, state, n) VALUES (new.queue, new.state, 1)
    ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER job_counts_leave AFTER UPDATE OF state, queue ON jobs
WHEN (new.state IS NOT old.state OR new.queue IS NOT old.queue)
 AND (old.state = 'completed' OR old.state = 'dead' OR old.state = 'cancelled')
BEGIN
    UPDATE job_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
END;

CREATE TRIGGER job_counts_enter AFTER UPDATE OF state, queue ON jobs
WHEN (new.state IS NOT old.state OR new.queue IS NOT old.queue)
 AND (new.state = 'completed' OR new.state = 'dead' OR new.state = 'cancelled')
BEGIN
    INSERT INTO job_counts (queue, state, n) VALUES (new.queue, new.state, 1)
    ON CONFLICT (queue, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs
WHEN old.state = 'completed' OR old.state = 'dead' OR old.state = 'cancelled'
BEGIN
    UPDATE job_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
END;

-- The jobs finished before this version, counted once (this runs in the
-- migration's BEGIN IMMEDIATE: no other writer changes a job meanwhile).
INSERT INTO job_counts (queue, state, n)
SELECT queue, state, count(*) FROM jobs
WHERE state = 'completed' OR state = 'dead' OR state = 'cancelled'
GROUP BY queue, state;
