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
-- The statements that move a job into or out of a finished state (settle,
-- the burial of a corrupt job, recover, retry, cancel, purge) tell the
-- writer the queue of each job they changed (an ack by a probe of the id
-- index right after it, the others by RETURNING), and the writer adds them
-- up per queue and state and writes the sums here in the same transaction
-- (counts.rs): one row write per queue and state per call, not per job.
-- No triggers, and no RETURNING on the ack: SQLite runs both as triggers,
-- and they cost the drain a third of its rate (BENCHMARKS.md, session 14).
CREATE TABLE job_counts (
    queue TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

-- The jobs finished before this version, counted once (this runs in the
-- migration's BEGIN IMMEDIATE: no other writer changes a job meanwhile).
INSERT INTO job_counts (queue, state, n)
SELECT queue, state, count(*) FROM jobs
WHERE state = 'completed' OR state = 'dead' OR state = 'cancelled'
GROUP BY queue, state;
