-- Schema version 11: keyed jobs (docs/CONTRACT.md, "Keyed jobs").
--
-- `key` groups the jobs of a queue that share per-key limits; NULL for a
-- plain job and for every job stored before this version. Adding a
-- nullable column rewrites no row.
ALTER TABLE jobs ADD COLUMN key TEXT;

-- Plain jobs keep their own claim indexes, now without the keyed jobs, so
-- a claim's plain walk never steps over a keyed job: the same indexes as
-- schema 1 with `AND key IS NULL`. Every job stored before this version
-- has no key, so the new indexes hold exactly what the old ones held, and
-- jobs in flight stay claimable. New names first, then the old dropped:
-- this runs in the migration's BEGIN IMMEDIATE, so no claim sees neither.
CREATE INDEX jobs_plain_pending ON jobs (queue, priority DESC, run_at, id) WHERE state = 'pending' AND key IS NULL;
CREATE INDEX jobs_plain_scheduled ON jobs (queue, priority DESC, run_at, id) WHERE state = 'scheduled' AND key IS NULL;
DROP INDEX jobs_pending;
DROP INDEX jobs_scheduled;

-- The keyed jobs waiting to run, by queue, priority and key, each key's
-- in claim order: the rotation is a skip scan of it (the next key after
-- the cursor is one seek, and its head is the first row found), and a
-- claim tells whether a queue has any keyed job at all with one probe.
CREATE INDEX jobs_keyed ON jobs (queue, priority DESC, key, run_at, id)
    WHERE key IS NOT NULL AND (state = 'pending' OR state = 'scheduled');

-- A key's Running jobs (its concurrency slots, held by their leases) are
-- read from jobs_lease (schema 2: every Running job), once per claim that
-- needs them: no index of their own. *A partial index whose WHERE names
-- `state` costs every state change of every job, plain ones too, a cursor
-- opened and closed (SQLite opens one on each index whose columns or WHERE
-- the UPDATE changes): jobs_keyed_running took about 1.6% of the plain
-- drain's instructions (BENCHMARKS.md, "Keyed jobs on SQLite").*

-- Per-key limits: one row per queue and key with limits of its own (an
-- override; all NULL = this key unlimited), and one with key '' for the
-- queue's default (a real key is 1 to 255 bytes, never ''). rate_period
-- in microseconds. No row: no limit.
CREATE TABLE key_limits (
    queue       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    concurrency INTEGER,
    rate_limit  INTEGER,
    rate_period INTEGER,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;

-- The rotation's cursor of each (queue, priority): the key it served
-- last. No row: before every key.
CREATE TABLE key_cursors (
    queue    TEXT    NOT NULL,
    priority INTEGER NOT NULL,
    key      TEXT    NOT NULL,
    PRIMARY KEY (queue, priority)
) WITHOUT ROWID;

-- Each rate-limited key's sliding log: n starts of (queue, key) at
-- instant `at`, one row per claim that started jobs of it. The claim
-- deletes the rows that left the window; a change of limits deletes the
-- logs of keys left without a rate.
CREATE TABLE key_starts (
    queue TEXT    NOT NULL,
    key   TEXT    NOT NULL,
    at    INTEGER NOT NULL,
    n     INTEGER NOT NULL
);
CREATE INDEX key_starts_window ON key_starts (queue, key, at);
