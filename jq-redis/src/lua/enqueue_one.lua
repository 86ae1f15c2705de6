-- enqueue_one.lua: stores one new job without a unique key (what a single
-- enqueue almost always is) as enqueue.lua would, with core.lua as its
-- only library: every script call runs its library's definitions first,
-- and this one does little else. HSETNX of the job's state both stores it
-- and tells a resend (the id is stored already: nothing is written), so
-- the call makes its writes and no read. enqueue.rs sends a job with a
-- unique key, and every batch of several, to enqueue.lua.
--
-- KEYS[1]  base of the job's queue ("<prefix>:{<prefix>:<queue>}:")
-- ARGV[1]  wake-up channel (PUBLISHed when the job is Pending)
-- ARGV[2]  id (32 hex)
-- ARGV[3]  its packed `jobs` value, ARGV[4] its packed `states` value
-- ARGV[5]  the index it goes to (`ready`, `scheduled`, `kwait` or
--          `kscheduled`), ARGV[6] its score there, ARGV[7] its member
-- ARGV[8]  timeout in milliseconds ("" = none)
-- ARGV[9]  present when the client asks for the HASHTABLE fields of the
--          queue's hashes (at most once a second per queue, with its
--          registry refresh: a lone job's call does not read whether they
--          are there)
-- (store.lua's PER_JOB values in the same order, less the queue index and
-- the unique key.) Returns { "" } when stored, { id } for a resend.

local base, id = KEYS[1], ARGV[2]
if redis.call('HSETNX', base .. 'states', id, ARGV[4]) == 0 then return { id } end
if ARGV[9] then
  redis.call('HSETNX', base .. 'states', '', HASHTABLE)
  redis.call('HSETNX', base .. 'jobs', '', HASHTABLE)
end
redis.call('HSET', base .. 'jobs', id, ARGV[3])
local index = ARGV[5]
redis.call('ZADD', base .. index, ARGV[6], ARGV[7])
redis.call('ZADD', base .. 'ids', '0', id)
if ARGV[8] ~= '' then
  redis.call('HSET', base .. 'extra', id, ARGV[8] .. '\0\0\0')
end
if index == 'kwait' then
  redis.call('INCR', base .. 'kpending')
end
if index == 'ready' or index == 'kwait' then
  redis.call('PUBLISH', ARGV[1], '1')
end
return { '' }
