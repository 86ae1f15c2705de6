-- common.lua: helpers prepended to every jq script (no KEYS/ARGV of its own).
--
-- A queue's keys all start with its base "<prefix>:{<prefix>:<queue>}:"
-- (see keys.rs); scripts get the bases as KEYS and derive every key of the
-- queue from them, so all keys one script touches share one hash slot.
-- Instants are integer microseconds; they stay below 2^53, so a Lua number
-- (a double) holds them exactly. Never format them with tostring (it uses
-- %.14g): use fmt().

local function fmt(n)
  return string.format('%d', n)
end
-- Numbers passed to redis.call go as strings made by fmt: Redis 7.0 turns a
-- Lua number argument into text with snprintf("%.17g"), about 4,000
-- instructions for a microsecond instant (scripts/redis-instructions.sh).

-- Redis does not roll a script back when it fails halfway, so a script
-- checks every stored field it computes with before its first write to
-- that job; a job whose fields it cannot use (hand-edited, foreign writer)
-- goes to Dead with the reason instead of stopping the script.

-- The integer `v` holds, or nil when it holds none (missing, not a number,
-- NaN, infinite, fractional, or beyond what a double holds exactly).
local function int(v)
  local n = tonumber(v)
  if n and n == math.floor(n) and n > -2 ^ 53 and n < 2 ^ 53 then return n end
  return nil
end

-- Why the field `name` with value `v` is unusable.
local function unusable(name, v)
  if v == nil or v == false then return 'field ' .. name .. ' is missing' end
  return 'field ' .. name .. ' ' .. cjson.encode(v) .. ' is not an integer'
end

-- Member of the ready set: score -priority (so ZRANGE gives the highest
-- priority first), then this member orders lexicographically by run_at
-- (20 zero-padded digits) and id (32 lowercase hex digits).
local function ready_member(run_at, id)
  local r = tonumber(run_at)
  if r < 0 then r = 0 end
  return string.format('%020d', r) .. id
end

local function job_key(base, id)
  return base .. 'job:' .. id
end

local function done_key(base, state)
  return base .. 'done:' .. state
end

-- Removes a job from the index of the state it is in.
local function unindex(base, id, state, run_at)
  if state == 'pending' then
    redis.call('ZREM', base .. 'ready', ready_member(run_at, id))
  elseif state == 'scheduled' then
    redis.call('ZREM', base .. 'scheduled', id)
  elseif state == 'running' then
    redis.call('ZREM', base .. 'leases', id)
  else
    redis.call('ZREM', done_key(base, state), id)
  end
end

local function make_pending(base, key, id, priority, run_at)
  redis.call('HSET', key, 'state', 'pending', 'run_at', fmt(run_at))
  redis.call('ZADD', base .. 'ready', fmt(-tonumber(priority)), ready_member(run_at, id))
end

local function make_scheduled(base, key, id, run_at)
  redis.call('HSET', key, 'state', 'scheduled', 'run_at', fmt(run_at))
  redis.call('ZADD', base .. 'scheduled', fmt(run_at), id)
end

-- Pending when due (delay zero), else Scheduled; returns the new state.
local function requeue(base, key, id, priority, now, delay)
  if delay <= 0 then
    make_pending(base, key, id, priority, now)
    return 'pending'
  end
  make_scheduled(base, key, id, now + delay)
  return 'scheduled'
end

-- A queue's `unique` hash maps a unique key to the ids of the live jobs
-- holding it, ascending and joined by ",". Almost always one id: several
-- only after an operator's retry brought a Dead job back while a newer
-- live job held its key (the contract lets them share it). Enqueue answers
-- with the first, the smallest id, as the other backends do, and the key
-- stays taken until the last of them leaves the live states.

-- The id enqueue answers for unique key `uk` of the queue, or nil.
local function unique_holder(base, uk)
  local v = redis.call('HGET', base .. 'unique', uk)
  if not v then return nil end
  local comma = string.find(v, ',', 1, true)
  if comma then return string.sub(v, 1, comma - 1) end
  return v
end

-- Job `id`, live again, holds unique key `uk` (beside any live holder).
local function unique_take(base, uk, id)
  local v = redis.call('HGET', base .. 'unique', uk)
  local ids = {}
  if v then
    for other in string.gmatch(v, '[^,]+') do
      if other == id then return end
      ids[#ids + 1] = other
    end
  end
  ids[#ids + 1] = id
  table.sort(ids)
  redis.call('HSET', base .. 'unique', uk, table.concat(ids, ','))
end

-- Job `id` left the live states: it no longer holds unique key `uk`
-- (nil or "" when it has none).
local function unique_release(base, uk, id)
  if not uk or uk == '' then return end
  local v = redis.call('HGET', base .. 'unique', uk)
  if v == id then
    redis.call('HDEL', base .. 'unique', uk)
  elseif v and string.find(v, ',', 1, true) then
    local rest = {}
    for other in string.gmatch(v, '[^,]+') do
      if other ~= id then rest[#rest + 1] = other end
    end
    redis.call('HSET', base .. 'unique', uk, table.concat(rest, ','))
  end
end

-- Moves a job to a terminal state and frees its unique key.
-- uk: the job's unique key when the caller read it already, else nil.
local function make_terminal(base, key, id, state, now, uk)
  redis.call('HSET', key, 'state', state, 'finished_at', fmt(now))
  redis.call('ZADD', done_key(base, state), fmt(now), id)
  if uk == nil then uk = redis.call('HGET', key, 'unique_key') end
  unique_release(base, uk, id)
  return state
end

-- Lease fields mean something only while the job is Running (readers
-- ignore them otherwise), so the hot paths (ack, retry, fail) leave them
-- behind and the next claim overwrites them; operator paths delete them.
local function clear_lease(key)
  redis.call('HDEL', key, 'lease_token', 'lease_worker', 'lease_expires_at')
end

-- Appends {"attempt":n,"at":micros,"message":"..."} to the job's errors
-- (a JSON array kept as text, so appending never re-encodes old entries).
local function append_error(key, attempt, now, message)
  local item = '{"attempt":' .. fmt(attempt) .. ',"at":' .. fmt(now) .. ',"message":' .. cjson.encode(message) .. '}'
  local cur = redis.call('HGET', key, 'errors')
  if not cur or cur == '' or cur == '[]' then
    cur = '[' .. item .. ']'
  else
    cur = string.sub(cur, 1, -2) .. ',' .. item .. ']'
  end
  redis.call('HSET', key, 'errors', cur)
end

-- `command key items...` in chunks of 1,000 items, so unpack stays small
-- (it fails near 8,000). The chunk size is even, so (score, member) pairs
-- of a ZADD never split.
local function call_chunked(command, key, items)
  local n = #items
  local i = 1
  while i <= n do
    local j = math.min(i + 999, n)
    redis.call(command, key, unpack(items, i, j))
    i = j + 1
  end
end

-- ZREM of many members.
local function zrem_chunked(key, members)
  call_chunked('ZREM', key, members)
end

-- ZADD of many (score, member) pairs.
local function zadd_chunked(key, pairs_)
  call_chunked('ZADD', key, pairs_)
end

-- Moves a job whose stored fields are unusable to Dead, with the reason as
-- the error of attempt `attempt` (0 when that is unknown too). The caller
-- has taken the job out of the index it was in.
local function bury_corrupt(base, key, id, attempt, now, reason)
  append_error(key, attempt or 0, now, reason)
  return make_terminal(base, key, id, 'dead', now)
end

-- Stores new jobs as enqueue.lua describes (one place for enqueue.lua and
-- fire.lua): `bases` and `names` per queue index, `now` their created_at,
-- `channel` PUBLISHed once when a job became Pending, and 9 values per job
-- in `args` from index `first` + 1 on. Returns one value per job: "" when
-- stored, else the id of the live job of its queue with its unique key.
local function store_jobs(bases, names, now, channel, args, first)
  -- per queue index: ZADD arguments for ready, scheduled and ids
  local ready, scheduled, ids = {}, {}, {}
  for q = 1, #bases do
    ready[q], scheduled[q], ids[q] = {}, {}, {}
  end
  local result = {}
  local woke = false
  local n = (#args - first) / 10
  for j = 0, n - 1 do
    local a = first + j * 10
    local id, qi, uk = args[a + 1], tonumber(args[a + 2]), args[a + 8]
    local base = bases[qi]
    local existing = false
    if uk ~= '' then
      local other = unique_holder(base, uk)
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
      local priority, run_at, member = args[a + 5], args[a + 6], args[a + 9]
      local state = 'scheduled'
      if member ~= '' then state = 'pending' end
      local key = base .. 'job:' .. id
      -- A small hash is a listpack, searched field by field from the front:
      -- state (read or written three times per drained job) goes first,
      -- then what a claim reads, and id and queue, which only HGETALL
      -- reads, last.
      if uk == '' then
        redis.call('HSET', key, 'state', state, 'kind', args[a + 3], 'payload', args[a + 4], 'priority', priority,
          'max_attempts', args[a + 7], 'run_at', run_at, 'created_at', now, 'id', id, 'queue', names[qi])
      else
        redis.call('HSET', key, 'state', state, 'kind', args[a + 3], 'payload', args[a + 4], 'priority', priority,
          'max_attempts', args[a + 7], 'run_at', run_at, 'created_at', now, 'id', id, 'queue', names[qi],
          'unique_key', uk)
        redis.call('HSET', base .. 'unique', uk, id)
      end
      if args[a + 10] ~= '' then
        redis.call('HSET', key, 'trace', args[a + 10])
      end
      if member ~= '' then
        woke = true
        local t = ready[qi]
        t[#t + 1] = fmt(-tonumber(priority))
        t[#t + 1] = member
      else
        local t = scheduled[qi]
        t[#t + 1] = run_at
        t[#t + 1] = id
      end
      local t = ids[qi]
      t[#t + 1] = '0'
      t[#t + 1] = id
    end
  end
  for q = 1, #bases do
    zadd_chunked(bases[q] .. 'ready', ready[q])
    zadd_chunked(bases[q] .. 'scheduled', scheduled[q])
    zadd_chunked(bases[q] .. 'ids', ids[q])
  end
  if woke then
    redis.call('PUBLISH', channel, '1')
  end
  return result
end
