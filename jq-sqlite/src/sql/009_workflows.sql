-- Schema version 9: workflows (results and dependencies).
--
-- `flow` tells the statements that finish a job whether it takes part in
-- a workflow, so a job without one costs nothing more: bit 1 = it has
-- children (settle looks for them), bit 2 = it is a step of a workflow
-- (purge removes its node), bit 4 = it has a result (purge removes it).
-- Adding a column with a constant default rewrites no row.
ALTER TABLE jobs ADD COLUMN flow INTEGER NOT NULL DEFAULT 0;
-- One row per stored workflow: a resend of the same workflow finds it.
CREATE TABLE workflows (
    id         BLOB    PRIMARY KEY,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
-- One row per step: its place, and how many parents it still waits for
-- (the job is Waiting while above zero), kept by the statements that
-- finish its parents, in their transaction.
CREATE TABLE job_nodes (
    id           BLOB    PRIMARY KEY,
    workflow     BLOB    NOT NULL,
    position     INTEGER NOT NULL,
    step         TEXT    NOT NULL,
    unfinished   INTEGER NOT NULL,
    cancelled_by BLOB
) WITHOUT ROWID;
CREATE UNIQUE INDEX job_nodes_workflow ON job_nodes (workflow, position);
-- One row per edge; `released` once the parent is done with for this
-- child (completed, or failed under run_anyway), so it counts once.
CREATE TABLE job_deps (
    parent     BLOB    NOT NULL,
    child      BLOB    NOT NULL,
    position   INTEGER NOT NULL,
    on_failure TEXT    NOT NULL,
    released   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (parent, child)
) WITHOUT ROWID;
CREATE INDEX job_deps_child ON job_deps (child, position);
-- Results stored with their ack, apart from the jobs so that the claim
-- and ack paths read no wider rows.
CREATE TABLE job_results (
    id     BLOB PRIMARY KEY,
    result TEXT NOT NULL
) WITHOUT ROWID;
