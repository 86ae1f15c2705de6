-- Migration 9: the waiting jobs counted through the claim index; the
-- jobs_waiting index of migration 8 goes.
--
-- `{schema}` is replaced by the configured (quoted) schema name.
--
-- jobs_waiting was one more index entry written by every enqueue: the
-- batch enqueue stored 18% fewer jobs per second with it (BENCHMARKS.md,
-- session 14). The claim index already holds exactly the waiting jobs
-- (Pending and Scheduled) with the queue as its first column; carrying
-- the state as an included column lets stats count them per queue and
-- state from it alone (an index-only scan), as they did from jobs_waiting,
-- at the cost of a few bytes per entry instead of a second entry. A list
-- of one queue's waiting jobs by id now reads that queue's entries and
-- keeps the first page (a bounded sort): tens of milliseconds for 100,000
-- waiting jobs, and no finished job read.
--
-- The new index is built beside the old one and takes its name, so claims
-- find jobs_claim at every moment of the migration's transaction.
DROP INDEX {schema}.jobs_waiting;

CREATE INDEX jobs_claim_9 ON {schema}.jobs (queue, priority DESC, run_at, id) INCLUDE (state)
    WHERE state IN ('pending', 'scheduled');

DROP INDEX {schema}.jobs_claim;

ALTER INDEX {schema}.jobs_claim_9 RENAME TO jobs_claim;
