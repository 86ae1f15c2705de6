-- enqueue.lua: stores a batch of new jobs, with uniqueness, atomically.
--
-- KEYS[q]  base of the q-th queue of the batch ("<prefix>:{<prefix>:<queue>}:")
-- ARGV[1]  now (microseconds)
-- ARGV[2]  wake-up channel (PUBLISHed once when a job became Pending)
-- ARGV[3]  queue names, one per KEYS entry, separated by "\n"
-- then 8 values per job:
--   id (32 hex), queue index (1-based into KEYS), kind, payload, priority
--   (integer), run_at (microseconds, "" = now), max_attempts, unique key
--   ("" = none)
-- attempts (0) and errors (none) are left out of new hashes: absent means
-- that, and every field written per job costs on the hot path.
-- Returns one value per job: "" when stored, else the id of the live job of
-- the same queue with the same unique key (nothing stored for it).

local now = tonumber(ARGV[1])
local names = {}
for name in string.gmatch(ARGV[3], '[^\n]+') do
  names[#names + 1] = name
end
local ready_adds = {}
local id_adds = {}
local result = {}
local woke = false
local n = (#ARGV - 3) / 8
for j = 0, n - 1 do
  local a = 3 + j * 8
  local id, qi, kind, payload = ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3], ARGV[a + 4]
  local priority, run_at, max_attempts, uk = ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8]
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
    result[#result + 1] = existing
  else
    result[#result + 1] = ''
    if run_at == '' then run_at = now else run_at = tonumber(run_at) end
    local state = 'pending'
    if run_at > now then state = 'scheduled' end
    local key = job_key(base, id)
    redis.call('HSET', key, 'id', id, 'queue', names[qi], 'kind', kind, 'payload', payload,
      'priority', priority, 'state', state, 'max_attempts', max_attempts,
      'run_at', fmt(run_at), 'created_at', fmt(now))
    if uk ~= '' then
      redis.call('HSET', key, 'unique_key', uk)
      redis.call('HSET', base .. 'unique', uk, id)
    end
    if state == 'pending' then
      woke = true
      local t = ready_adds[base]
      if not t then t = {}; ready_adds[base] = t end
      t[#t + 1] = -tonumber(priority)
      t[#t + 1] = ready_member(run_at, id)
    else
      redis.call('ZADD', base .. 'scheduled', run_at, id)
    end
    local t = id_adds[base]
    if not t then t = {}; id_adds[base] = t end
    t[#t + 1] = 0
    t[#t + 1] = id
  end
end
for base, t in pairs(ready_adds) do
  zadd_chunked(base .. 'ready', t)
end
for base, t in pairs(id_adds) do
  zadd_chunked(base .. 'ids', t)
end
if woke then
  redis.call('PUBLISH', ARGV[2], '1')
end
return result
