-- enqueue.lua: stores a batch of new jobs, with uniqueness, atomically.
--
-- KEYS[q]  base of the q-th queue of the batch ("<prefix>:{<prefix>:<queue>}:")
-- ARGV[1]  now (microseconds): created_at of every job
-- ARGV[2]  wake-up channel (PUBLISHed once when a job became Pending)
-- then 12 values per job, all computed by the client so that the loop below
-- only moves strings:
--   id (32 hex), queue index (1-based into KEYS), kind, payload, priority
--   (integer), run_at (microseconds, "now" already filled in),
--   max_attempts, unique key ("" = none), ready member (the job's member of
--   the ready set when it is Pending, i.e. run_at <= now; "" when it is
--   Scheduled), trace (the enqueuing span's W3C context; "" = none),
--   timeout in milliseconds ("" = none), key ("" = none; a keyed job goes
--   to its key's sets, schema.rs)
-- Returns one value per job: "" when stored, else the id answered instead
-- (nothing stored for it): its own when the queue holds that id already
-- (a resend), or the live job of the same queue with the same unique key.

return store_jobs(KEYS, ARGV[1], ARGV[2], ARGV, 2)
