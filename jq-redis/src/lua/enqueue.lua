-- enqueue.lua: stores a batch of new jobs, with uniqueness, atomically.
--
-- KEYS[q]  base of the q-th queue of the batch ("<prefix>:{<prefix>:<queue>}:")
-- ARGV[1]  now (microseconds): created_at of every job
-- ARGV[2]  wake-up channel (PUBLISHed once when a job became Pending)
-- ARGV[3]  queue names, one per KEYS entry, separated by "\n"
-- then 10 values per job, all computed by the client so that the loop below
-- only moves strings:
--   id (32 hex), queue index (1-based into KEYS), kind, payload, priority
--   (integer), run_at (microseconds, "now" already filled in),
--   max_attempts, unique key ("" = none), ready member (the job's member of
--   the ready set when it is Pending, i.e. run_at <= now; "" when it is
--   Scheduled), trace (the enqueuing span's W3C context; "" = none)
-- attempts (0) and errors (none) are left out of new hashes: absent means
-- that, and every field written per job costs on the hot path.
-- Returns one value per job: "" when stored, else the id of the live job of
-- the same queue with the same unique key (nothing stored for it).

local now = ARGV[1]
local names = {}
for name in string.gmatch(ARGV[3], '[^\n]+') do
  names[#names + 1] = name
end
-- per queue index: ZADD arguments for ready, scheduled and ids
local ready, scheduled, ids = {}, {}, {}
for q = 1, #KEYS do
  ready[q], scheduled[q], ids[q] = {}, {}, {}
end
local result = {}
local woke = false
local n = (#ARGV - 3) / 10
for j = 0, n - 1 do
  local a = 3 + j * 10
  local id, qi, uk = ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 8]
  local base = KEYS[qi]
  local existing = false
  if uk ~= '' then
    local other = redis.call('HGET', base .. 'unique', uk)
    if other then
      local st = redis.call('HGET', job_key(base, other), 'state')
      if st == 'scheduled' or st == 'pending' or st == 'running' then
        existing = other
      end
    end
  end
  if existing then
    result[j + 1] = existing
  else
    result[j + 1] = ''
    local priority, run_at, member = ARGV[a + 5], ARGV[a + 6], ARGV[a + 9]
    local state = 'scheduled'
    if member ~= '' then state = 'pending' end
    local key = base .. 'job:' .. id
    if uk == '' then
      redis.call('HSET', key, 'id', id, 'queue', names[qi], 'kind', ARGV[a + 3], 'payload', ARGV[a + 4],
        'priority', priority, 'state', state, 'max_attempts', ARGV[a + 7], 'run_at', run_at, 'created_at', now)
    else
      redis.call('HSET', key, 'id', id, 'queue', names[qi], 'kind', ARGV[a + 3], 'payload', ARGV[a + 4],
        'priority', priority, 'state', state, 'max_attempts', ARGV[a + 7], 'run_at', run_at, 'created_at', now,
        'unique_key', uk)
      redis.call('HSET', base .. 'unique', uk, id)
    end
    if ARGV[a + 10] ~= '' then
      redis.call('HSET', key, 'trace', ARGV[a + 10])
    end
    if member ~= '' then
      woke = true
      local t = ready[qi]
      t[#t + 1] = -tonumber(priority)
      t[#t + 1] = member
    else
      local t = scheduled[qi]
      t[#t + 1] = run_at
      t[#t + 1] = id
    end
    local t = ids[qi]
    t[#t + 1] = 0
    t[#t + 1] = id
  end
end
for q = 1, #KEYS do
  zadd_chunked(KEYS[q] .. 'ready', ready[q])
  zadd_chunked(KEYS[q] .. 'scheduled', scheduled[q])
  zadd_chunked(KEYS[q] .. 'ids', ids[q])
end
if woke then
  redis.call('PUBLISH', ARGV[2], '1')
end
return result
