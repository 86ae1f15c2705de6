-- enqueue_many.lua: stores a batch of new jobs of one queue, none with a
-- unique key (what a batch almost always is), as enqueue.lua would, with
-- core.lua as its only library. enqueue.rs lays the arguments out as the
-- commands take them, so the script hands ranges of ARGV to HMGET, HSET and
-- ZADD and runs no Lua per job but the check for resends: enqueue.lua's
-- loop over each job's values was a third of a batch's server
-- instructions (scripts/redis-instructions.sh). A resend (an id the queue
-- holds already) makes it write nothing and answer { 'resend' }: enqueue.rs
-- then sends the batch to enqueue.lua, which answers each job. (An id twice
-- in one batch never comes here: enqueue.rs checks.)
--
-- KEYS[1]  base of the queue ("<prefix>:{<prefix>:<queue>}:")
-- ARGV[1]  wake-up channel (PUBLISHed once when a job became Pending)
-- ARGV[2]  n, the number of jobs
-- ARGV[3]  how many of them go to `kwait` (keyed and Pending: INCRBY kpending)
-- ARGV[4]  "1" when one of them is Pending (`ready` or `kwait`: PUBLISH)
-- ARGV[5..8]  how many go to `ready`, `scheduled`, `kwait`, `kscheduled`
-- ARGV[9]  how many have a timeout
-- then, from ARGV[10]: the n ids; (id, packed `jobs` value) x n; (id,
-- packed `states` value) x n; ('0', id) x n for `ids`; (score, member)
-- pairs for `ready`, `scheduled`, `kwait` and `kscheduled`, as many as
-- ARGV[5..8] say, in that order; (id, timeout fields) pairs for `extra`.
-- Returns {} when every job was stored, { 'resend' } when none was.

local base = KEYS[1]
local n = tonumber(ARGV[2])

-- which of the ids exist (a resend), and whether the queue's hashes hold
-- the HASHTABLE field (field '', asked last)
local ids_at = 10
local i = ids_at
while i < ids_at + n do
  local j = math.min(i + 999, ids_at + n - 1)
  local got = redis.call('HMGET', base .. 'states', unpack(ARGV, i, j))
  for k = 1, #got do
    if got[k] then return { 'resend' } end
  end
  i = j + 1
end
if not redis.call('HGET', base .. 'states', '') then
  -- the queue's hashes are new (or were deleted from outside)
  redis.call('HSET', base .. 'jobs', '', HASHTABLE)
  redis.call('HSET', base .. 'states', '', HASHTABLE)
end

local at = ids_at + n
call_chunked('HSET', base .. 'jobs', ARGV, at, at + 2 * n - 1)
at = at + 2 * n
call_chunked('HSET', base .. 'states', ARGV, at, at + 2 * n - 1)
at = at + 2 * n
call_chunked('ZADD', base .. 'ids', ARGV, at, at + 2 * n - 1)
at = at + 2 * n
local indexes = { 'ready', 'scheduled', 'kwait', 'kscheduled', 'extra' }
for x = 1, 5 do
  local c = tonumber(ARGV[4 + x])
  if c > 0 then
    call_chunked(x == 5 and 'HSET' or 'ZADD', base .. indexes[x], ARGV, at, at + 2 * c - 1)
    at = at + 2 * c
  end
end
if ARGV[3] ~= '0' then
  redis.call('INCRBY', base .. 'kpending', ARGV[3])
end
if ARGV[4] == '1' then
  redis.call('PUBLISH', ARGV[1], '1')
end
return {}
