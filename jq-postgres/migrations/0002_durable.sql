-- Migration 2: durable jobs (docs/CONTRACT.md, "Durable jobs"). Tables
-- only; no function. A released migration is never edited.
--
-- A job that has any of these rows carries bit 4 of `jobs.flow` (set by
-- its first checkpoint, suspend or signal), so purge deletes them for
-- such jobs only and a plain job pays nothing. No foreign key on jobs,
-- for the reason migration 1 gives for job_nodes (internal row triggers
-- on every update and delete of `jobs`).
--
-- `journal`: a durable job's entries by index from 0. `kind` is step,
-- sleep, signal, timeout or patch; `value` a step's result or a signal's
-- payload as text (not jsonb: the bytes a limit counts are the ones
-- stored, and a value reads back as it was recorded); `until` a sleep's
-- instant; `bytes` what the entry counts against the journal's limit.
CREATE TABLE {schema}.journal (
    job_id uuid        NOT NULL,
    idx    integer     NOT NULL,
    name   text        NOT NULL,
    kind   text        NOT NULL,
    value  text,
    until  timestamptz,
    at     timestamptz NOT NULL,
    bytes  integer     NOT NULL,
    PRIMARY KEY (job_id, idx)
);

-- Signals sent to a job and not taken yet, taken oldest first per name
-- (`sent_at`, then `id`, a UUID v7 made by the sender), deleted when taken.
CREATE TABLE {schema}.signals (
    job_id  uuid        NOT NULL,
    id      uuid        NOT NULL,
    name    text        NOT NULL,
    payload text        NOT NULL,
    sent_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, id)
);

-- The wait a job is in: the journal index its outcome goes to, the
-- signal's name and the timeout fixed by its first suspend.
CREATE TABLE {schema}.waits (
    job_id uuid        PRIMARY KEY,
    idx    integer     NOT NULL,
    name   text        NOT NULL,
    until  timestamptz NOT NULL
);
