-- Schema version 2: durable jobs (docs/CONTRACT.md, "Durable jobs"). A
-- released version is never edited (tests/schema.rs holds its checksum).
--
-- A job that has any of these rows carries bit 8 of `jobs.flow` (set by
-- the first checkpoint, suspend or signal), so purge deletes them for such
-- jobs only and a plain job pays nothing.
--
-- `journal`: a durable job's entries, by index from 0. `kind` is step,
-- sleep, signal, timeout or patch; `value` a step's result or a signal's
-- payload (JSON text as given); `until` a sleep's instant; `bytes` what the
-- entry counts against the journal's limit (its name's and value's bytes,
-- jq_core::durable::Entry::bytes), kept so the limit reads one sum.
CREATE TABLE journal (
    job_id BLOB    NOT NULL,
    idx    INTEGER NOT NULL,
    name   TEXT    NOT NULL,
    kind   TEXT    NOT NULL,
    value  TEXT,
    until  INTEGER,
    at     INTEGER NOT NULL,
    bytes  INTEGER NOT NULL,
    PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;

-- Signals sent to a job and not taken yet; taken oldest first (`seq`) per
-- name, deleted when taken.
CREATE TABLE signals (
    seq     INTEGER PRIMARY KEY,
    job_id  BLOB    NOT NULL,
    name    TEXT    NOT NULL,
    payload TEXT    NOT NULL,
    sent_at INTEGER NOT NULL
);
CREATE INDEX signals_job ON signals (job_id, name, seq);

-- The wait a job is in: the journal index its outcome goes to, the
-- signal's name and the timeout fixed by its first suspend.
CREATE TABLE waits (
    job_id BLOB    PRIMARY KEY,
    idx    INTEGER NOT NULL,
    name   TEXT    NOT NULL,
    until  INTEGER NOT NULL
) WITHOUT ROWID;
