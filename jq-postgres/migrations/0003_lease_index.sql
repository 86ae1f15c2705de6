-- Migration 3: the lease index covers held leases, not the Running state.
--
-- `{schema}` is replaced by the configured (quoted) schema name.
--
-- Complete and heartbeat join an array of (id, token) to the table, guarded
-- on `state = 'running'`. That guard matched migration 1's
-- `jobs_running ... WHERE state = 'running'`, and statistics gathered while
-- nothing ran (the usual case for a table of finished jobs) estimate that
-- index at one row: the planner then walked every running job and, for each,
-- rescanned the whole batch (running x batch comparisons, 60 ms for 200
-- completions with 300 jobs running). With the index on the lease itself,
-- the guard no longer implies its predicate, so complete and heartbeat look
-- each job up by primary key; recover's `lease_expires_at <= $1` still
-- implies it. A lease is held exactly while the job is Running: claim sets
-- it, and every way out of Running clears it.
--
-- Building the new index reads the whole table once and blocks writes to
-- it meanwhile (0.2 s for a million rows here, cached): run `migrate()` when
-- a pause of enqueues is acceptable, or purge finished jobs first.
DROP INDEX {schema}.jobs_running;

CREATE INDEX jobs_lease_expiry ON {schema}.jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
