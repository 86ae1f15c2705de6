-- enqueue.lua: stores a batch of new jobs, with uniqueness, atomically.
-- Its library is core.lua and store.lua only (scripts.rs): an enqueue
-- pays for none of the other scripts' helpers.
--
-- KEYS[q]  base of the q-th queue of the batch ("<prefix>:{<prefix>:<queue>}:")
-- ARGV[1]  wake-up channel (PUBLISHed once when a job became Pending)
-- ARGV[2]  "1" when the client asks a lone job's call to write the
--          HASHTABLE field of its queue's hashes (it does at most once a
--          second per queue, with the registry's refresh); a batch of
--          several jobs learns whether they lack it from the HMGET it
--          makes anyway
-- then PER_JOB (store.lua) values per job, all computed by the client.
-- Returns one value per job: "" when stored, else the id answered instead
-- (nothing stored for it): its own when the queue holds that id already
-- (a resend), or the live job of the same queue with the same unique key.
--
-- A lone job without a unique key (what a single enqueue almost always
-- is) takes a short path: HSETNX of its state both stores it and tells a
-- resend (the id is stored already: nothing is written), so it costs its
-- writes and no read.

if #ARGV == 2 + PER_JOB and ARGV[7] == '' then
  local base, id = KEYS[1], ARGV[3]
  if redis.call('HSETNX', base .. 'states', id, ARGV[6]) == 0 then return { id } end
  if ARGV[2] == '1' then
    redis.call('HSETNX', base .. 'states', '', HASHTABLE)
    redis.call('HSETNX', base .. 'jobs', '', HASHTABLE)
  end
  redis.call('HSET', base .. 'jobs', id, ARGV[5])
  local index = ARGV[8]
  redis.call('ZADD', base .. index, ARGV[9], ARGV[10])
  redis.call('ZADD', base .. 'ids', '0', id)
  if ARGV[11] ~= '' then
    redis.call('HSET', base .. 'extra', id, ARGV[11] .. '\0\0\0')
  end
  if index == 'kwait' then
    redis.call('INCR', base .. 'kpending')
  end
  if index == 'ready' or index == 'kwait' then
    redis.call('PUBLISH', ARGV[1], '1')
  end
  return { '' }
end
return store_jobs(KEYS, ARGV[1], ARGV, 2)
