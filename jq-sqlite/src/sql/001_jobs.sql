-- Schema version 1: the jobs table and the indexes of the hot paths.
--
-- Instants are INTEGER microseconds since the Unix epoch (the storage's
-- clock, never SQLite's). Ids and lease tokens are 16-byte UUID BLOBs.
-- `errors` is a JSON array of {"attempt": n, "at": micros, "message": text},
-- oldest first. A rowid table (not WITHOUT ROWID) keeps interior pages
-- small; `seq` is the rowid, `id` the job's UUID v7.
CREATE TABLE jobs (
    seq              INTEGER PRIMARY KEY,
    id               BLOB    NOT NULL UNIQUE,
    queue            TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    priority         INTEGER NOT NULL,
    state            TEXT    NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    created_at       INTEGER NOT NULL,
    finished_at      INTEGER,
    lease_token      BLOB,
    lease_worker     TEXT,
    lease_expires_at INTEGER,
    errors           TEXT    NOT NULL DEFAULT '[]',
    unique_key       TEXT
);

-- Claim walks these two in claim order and stops at its limit: Pending
-- jobs in one walk, due Scheduled jobs in one range scan per priority (so
-- that a million jobs scheduled for tomorrow are never walked through).
-- Both are partial, so finished jobs never slow a claim down.
CREATE INDEX jobs_pending ON jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';
CREATE INDEX jobs_scheduled ON jobs (queue, priority DESC, run_at, id) WHERE state = 'scheduled';

-- Partial-index conditions are evaluated on every insert and update:
-- lists of three or more in `IN (...)` build a temporary b-tree each time,
-- so they are written as OR chains, and queries repeat them verbatim so
-- that SQLite sees they imply the index's condition.
--
-- Unique-key lookups among live jobs only (not UNIQUE: a retried Dead job
-- may legitimately share its key with a newer live job).
CREATE INDEX jobs_unique ON jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL AND (state = 'scheduled' OR state = 'pending' OR state = 'running');
