-- Migration 6: queue controls (ControlStorage::set_paused, set_limits, queues).
-- Existing jobs are untouched: a queue without a row in queue_controls has
-- no control, and its claims keep the one-statement path (sql/claim.sql,
-- which only looks this table up by primary key).
--
-- `{schema}` is replaced by the configured (quoted) schema name.
--
-- queue_controls: one row per queue with a pause or a limit; the row is
-- deleted once its pause and limits are all cleared. Claims of a
-- controlled queue lock its row (FOR UPDATE), so they serialise per queue
-- and count what earlier ones committed. rate_period in microseconds.
CREATE TABLE {schema}.queue_controls (
    queue       text        PRIMARY KEY,
    paused_at   timestamptz,
    concurrency integer,
    rate_limit  integer,
    rate_period bigint
);

-- The rate limit's sliding log: n starts of the queue at instant `at`, one
-- row per claim that started jobs of a rate-limited queue; the claim
-- deletes the rows that left the window.
CREATE TABLE {schema}.queue_starts (
    queue text        NOT NULL,
    at    timestamptz NOT NULL,
    n     integer     NOT NULL
);
CREATE INDEX queue_starts_window ON {schema}.queue_starts (queue, at);

-- Which claimers met a control: each worker's latest claim that asked for
-- a controlled queue, and whether the queue was paused then.
CREATE TABLE {schema}.queue_seen (
    queue   text        NOT NULL,
    worker  text        NOT NULL,
    seen_at timestamptz NOT NULL,
    paused  boolean     NOT NULL,
    PRIMARY KEY (queue, worker)
);
