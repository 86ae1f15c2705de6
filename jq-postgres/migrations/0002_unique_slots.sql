-- Migration 2: unique keys that a retried Dead job may share.
--
-- `{schema}` is replaced by the configured (quoted) schema name.
--
-- An operator's retry moves a Dead job back to Pending even when a newer live
-- job of its queue holds the same unique key (the contract's retry is "Dead ->
-- Pending", and the model, SQLite and Redis all allow it). Migration 1's
-- unique index refused that with a unique violation. Now the index is on
-- (queue, unique_key, key_slot): every enqueued job takes the shared nil slot,
-- so concurrent enqueuers of one key still serialise on it and never both
-- insert; a job retried while another live job holds its key takes a slot of
-- its own (its id) instead. Enqueue looks for any live job of the key,
-- whichever slot it has, before inserting.
ALTER TABLE {schema}.jobs
    ADD COLUMN key_slot uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000';

DROP INDEX {schema}.jobs_unique;

CREATE UNIQUE INDEX jobs_unique ON {schema}.jobs (queue, unique_key, key_slot)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running');
