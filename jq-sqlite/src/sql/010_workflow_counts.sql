-- Schema version 10: the counts of each workflow's steps per state, so
-- that `workflow(id)` (its counts, and whether it is finished) reads one
-- range of this table instead of every step of the workflow
-- (docs/CONTRACT.md, "Workflows"; Redis keeps the same summary in a hash).
--
-- Kept like job_counts (007_job_counts.sql): every writer call that
-- changes the state of a step (a job whose `flow` has bit 2) adds up, per
-- workflow and state, what it moved (one out of the old state, one into the
-- new) and writes one sum per workflow and state before it returns, in its
-- transaction (counts.rs). A plain job costs nothing more: the statements
-- that change a job's state learn whether it is a step from `flow`, which
-- they already read, and only steps look up their workflow (one probe of
-- job_nodes' primary key). No triggers: SQLite opens a statement journal
-- for every UPDATE of a table with triggers, and they cost every plain job
-- (BENCHMARKS.md, session 18).
--
-- A purged step leaves the counts (its workflow stays known, in
-- `workflows`). A row whose count went back to zero stays, and is skipped
-- by the readers.
CREATE TABLE workflow_counts (
    workflow BLOB    NOT NULL,
    state    TEXT    NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (workflow, state)
) WITHOUT ROWID;

-- The workflows with Scheduled steps: promote reads the due steps among
-- the jobs it moves only when one exists (promote_steps.sql), so a store
-- without such steps promotes as before.
CREATE INDEX workflow_counts_scheduled ON workflow_counts (workflow) WHERE state = 'scheduled' AND n > 0;

-- The steps stored before this version, counted once (this runs in the
-- migration's BEGIN IMMEDIATE: no other writer changes a job meanwhile).
INSERT INTO workflow_counts (workflow, state, n)
SELECT n.workflow, j.state, count(*) FROM job_nodes n JOIN jobs j ON j.id = n.id
GROUP BY n.workflow, j.state;
