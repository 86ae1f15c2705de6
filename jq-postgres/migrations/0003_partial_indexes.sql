-- Migration 3: partial indexes that a state guard cannot pick by mistake.
--
-- `{schema}` is replaced by the configured (quoted) schema name.
--
-- Statements that change jobs found by id (complete, heartbeat, retry) also
-- guard on the state. Migration 1's `jobs_running` (WHERE state = 'running')
-- and `jobs_finished` (WHERE state IN the terminal states) matched those
-- guards, and statistics gathered while no job was in that state (the usual
-- case: ANALYZE sees a table of completed jobs) estimate such an index at
-- one row. The generic plan then walked every running (or dead) job instead
-- of looking the ids up: 60 ms for 200 settlements with 300 jobs running,
-- and a retry that read every Dead job. Each index is now keyed on a column
-- that is set exactly in the states it covers, so a state guard no longer
-- implies its predicate, while the statements it serves still do:
--
-- - a lease (lease_expires_at) is held exactly while the job is Running:
--   claim sets it, every way out of Running clears it; recover's
--   `lease_expires_at <= $1` implies the predicate;
-- - finished_at is set exactly in the terminal states; purge's
--   `finished_at < $2` implies the predicate, so a generic plan (state a
--   parameter) can use the index, which it could not before.
--
-- Building the new indexes reads the table twice and blocks writes to it
-- meanwhile (about 0.5 s for a million cached rows here).
DROP INDEX {schema}.jobs_running;

CREATE INDEX jobs_lease_expiry ON {schema}.jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;

DROP INDEX {schema}.jobs_finished;

CREATE INDEX jobs_finished ON {schema}.jobs (state, finished_at) WHERE finished_at IS NOT NULL;
