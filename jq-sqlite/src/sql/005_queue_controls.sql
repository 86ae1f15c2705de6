-- Schema version 5: queue controls (ControlStorage::set_paused, set_limits,
-- queues). Existing jobs are untouched; a queue without a row here has no
-- control, and the claim reads this table by primary key once per asked
-- queue.
--
-- queue_controls: one row per queue with a pause or a limit; a row whose
-- pause and limits are all cleared is deleted. paused_at and rate_period
-- in microseconds (the storage's clock).
CREATE TABLE queue_controls (
    queue       TEXT    PRIMARY KEY,
    paused_at   INTEGER,
    concurrency INTEGER,
    rate_limit  INTEGER,
    rate_period INTEGER
) WITHOUT ROWID;

-- The rate limit's sliding log: n starts of the queue at instant `at`, one
-- row per claim that started jobs of a rate-limited queue. The claim
-- deletes the rows that left the window.
CREATE TABLE queue_starts (
    queue TEXT    NOT NULL,
    at    INTEGER NOT NULL,
    n     INTEGER NOT NULL
);
CREATE INDEX queue_starts_window ON queue_starts (queue, at);

-- Which claimers met a control: each worker's latest claim that asked for
-- a controlled queue, and whether it was paused then (for operators).
CREATE TABLE queue_seen (
    queue   TEXT    NOT NULL,
    worker  TEXT    NOT NULL,
    seen_at INTEGER NOT NULL,
    paused  INTEGER NOT NULL,
    PRIMARY KEY (queue, worker)
) WITHOUT ROWID;
