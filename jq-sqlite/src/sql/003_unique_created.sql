-- Schema version 3: the jobs of a unique key by creation, in every state,
-- for the unique period (the contract's "Unique rules"): an enqueue for a
-- period looks for a job of its key created within it, finished ones too,
-- and walks only those (jobs_unique holds live jobs alone). Jobs without a
-- unique key are not in it: a plain enqueue pays nothing for it.
CREATE INDEX jobs_unique_created ON jobs (queue, unique_key, created_at) WHERE unique_key IS NOT NULL;
