-- enqueue.lua: stores a batch of new jobs, with uniqueness, atomically.
-- Its library is core.lua and store.lua only (scripts.rs): an enqueue
-- pays for none of the other scripts' helpers. A lone job without a
-- unique key goes to enqueue_one.lua instead.
--
-- KEYS[q]  base of the q-th queue of the batch ("<prefix>:{<prefix>:<queue>}:")
-- ARGV[1]  wake-up channel (PUBLISHed once when a job became Pending)
-- then PER_JOB (store.lua) values per job, all computed by the client.
-- Returns one value per job: "" when stored, else the id answered instead
-- (nothing stored for it): its own when the queue holds that id already
-- (a resend), or the live job of the same queue with the same unique key.

return store_jobs(KEYS, ARGV[1], ARGV, 1)
