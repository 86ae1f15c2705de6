-- Migration 8: counters of finished jobs, so that stats and the list of
-- queues cost the same whatever the number of finished jobs.
--
-- `{schema}` is replaced by the configured (quoted) schema name.
--
-- Before this, `stats` and `queues` grouped the whole jobs table, and a
-- dashboard refreshes both every few seconds: with ten million finished
-- jobs that is seconds of reading per refresh. Finished jobs (Completed,
-- Dead, Cancelled) are now counted here, per queue and state; live jobs
-- (Scheduled, Pending, Running), which are few by comparison, are still
-- counted from the jobs themselves through the partial indexes that hold
-- only them: jobs_waiting below, and jobs_lease_expiry (Running).
--
-- Every statement that moves a job into or out of a finished state
-- (settle, bury, cancel, retry, recover, purge) adds its change to this
-- table in the same statement, one row per (queue, state) it changed,
-- aggregated over its whole batch, on one of 16 shards picked at random
-- per statement: concurrent settlers of one queue then seldom wait on the
-- same row, and a queue's count is the sum of its shards. Shards may hold
-- negative numbers (a purge on another shard than the acks); only the sum
-- means something. No trigger: a trigger would run for claims and
-- heartbeats too, the hot path that never changes these counts.
--
-- Rows are never deleted: one per (queue, finished state, shard) ever
-- used, at most 48 per queue.
CREATE TABLE {schema}.job_counts (
    queue text     NOT NULL,
    state text     NOT NULL,
    shard smallint NOT NULL,
    n     bigint   NOT NULL,
    PRIMARY KEY (queue, state, shard)
);

-- Writers of an older build do not count: while the counts are taken, no
-- job may change (SHARE lets reads through, waits for writers in flight,
-- and holds new ones until this migration commits). Reading ten million
-- finished jobs here takes seconds, once.
LOCK TABLE {schema}.jobs IN SHARE MODE;

INSERT INTO {schema}.job_counts (queue, state, shard, n)
SELECT queue, state, 0, count(*)
FROM {schema}.jobs
WHERE state IN ('completed', 'dead', 'cancelled')
GROUP BY queue, state;

-- The jobs waiting to run (Pending and Scheduled) by queue, state and id:
-- stats count them from it alone (an index-only scan), and a list of one
-- queue's Pending or Scheduled jobs (the dashboard's oldest pending job of
-- each queue) walks it in id order, where the primary key would first pass
-- every older finished job. Its predicate is the one of migration 3's
-- kind: finished_at is set exactly in the finished states and a lease
-- exactly while Running, so no statement's state guard implies it and no
-- plan takes it by mistake. Jobs enter it when they are enqueued or handed
-- back, never when claimed or finished: the drain does not write to it.
CREATE INDEX jobs_waiting ON {schema}.jobs (queue, state, id)
    WHERE finished_at IS NULL AND lease_expires_at IS NULL;
