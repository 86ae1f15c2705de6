-- claim.lua: moves up to `limit` claimable jobs of the given queues to
-- Running, each with a lease under the claim's token, and returns them.
--
-- KEYS[q]  base of each asked queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  limit
-- ARGV[3]  lease duration (microseconds)
-- ARGV[4]  worker name
-- ARGV[5]  due bound: at most this many due Scheduled jobs per queue (the
--          earliest due) are considered besides the Pending ones; promote
--          moves the rest, so the order is exact while a queue has at most
--          this many due Scheduled jobs
-- ARGV[6]  the claim's lease token, shared by every job it takes (fencing
--          is per job id and token)
-- Queue controls (keys of the queue's base, so of its slot): `control`
-- (hash: paused_at, concurrency, rate_limit, rate_period in microseconds)
-- gives each queue an allowance: none while paused, at most concurrency
-- minus its Running jobs (ZCARD leases: expired leases hold their slot
-- until recover), at most rate_limit minus its starts in the window
-- (now - rate_period, now] (`starts`: a sorted set, score the start
-- instant from ARGV[1], never the server's TIME). A queue with no control
-- costs one HMGET. Candidates beyond a queue's allowance are not touched.
-- Each claim that meets a control records its worker in `seen`.
--
-- Returns one string per claimed job, in claim order (priority high to low,
-- then run_at, then id), its fields joined by "\0": kind, payload,
-- priority, max_attempts, run_at, created_at, attempts (after this claim),
-- errors, unique_key, trace, id, queue index (1-based into KEYS). An absent
-- field is "" (no field has "" as a value) and none holds a "\0" (names
-- refuse control characters, JSON text escapes them). One string rather
-- than an array: Redis converts each array element between Lua and the
-- reply, about 900 instructions apiece. State, token, worker and expiry are
-- what the client sent. A candidate whose stored priority or
-- attempts is not an integer is moved to Dead with the reason instead (see
-- int() in common.lua) and returned as { "corrupt", id, reason } in its
-- place.

local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local worker = ARGV[4]
local due_bound = tonumber(ARGV[5])
local token = ARGV[6]

-- each queue's allowance, and whether its starts are logged
local allow = {}
local rated = {}
for q = 1, #KEYS do
  local base = KEYS[q]
  local c = redis.call('HMGET', base .. 'control', 'paused_at', 'concurrency', 'rate_limit', 'rate_period')
  local a = limit
  if c[1] or c[2] or c[3] then
    redis.call('HSET', base .. 'seen', worker, fmt(now) .. (c[1] and ':1' or ':0'))
    if c[1] then
      a = 0
    else
      if c[2] then
        a = math.min(a, math.max(0, tonumber(c[2]) - redis.call('ZCARD', base .. 'leases')))
      end
      if c[3] and c[4] then
        redis.call('ZREMRANGEBYSCORE', base .. 'starts', '-inf', fmt(now - tonumber(c[4])))
        a = math.min(a, math.max(0, tonumber(c[3]) - redis.call('ZCARD', base .. 'starts')))
        rated[q] = true
      end
    end
  end
  allow[q] = a
end

local candidates = {}
-- rows of the candidates buried before the loop below (see the header)
local buried = {}
local sorted = #KEYS == 1
-- True when the candidates were popped off ready already (see below).
local popped = false
for q = 1, #KEYS do
  local base = KEYS[q]
  local qlimit = allow[q]
  if qlimit > 0 then
    -- Due Scheduled jobs are claimable too; they are candidates as they are
    -- (claim changes no job it does not take), read up to the bound.
    local due = redis.call('ZRANGEBYSCORE', base .. 'scheduled', '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', '0', ARGV[5])
    if #KEYS == 1 and #due == 0 then
      -- The common case, one queue with no due Scheduled job: ready's order
      -- is claim order and every candidate is taken, so they are read and
      -- removed by rank (cheaper than ZREM of each member; and ZPOPMIN's
      -- scores, which nothing needs here, cost a "%.17g" each to send).
      local top = redis.call('ZRANGE', base .. 'ready', '0', fmt(qlimit - 1))
      if #top > 0 then
        redis.call('ZREMRANGEBYRANK', base .. 'ready', '0', fmt(#top - 1))
      end
      for i = 1, #top do
        candidates[#candidates + 1] = { 0, top[i], base, false, q }
      end
      popped = true
      break
    end
    for i = 1, #due, 2 do
      local id = due[i]
      local key = job_key(base, id)
      local stored = redis.call('HGET', key, 'priority')
      local priority = int(stored)
      if priority then
        candidates[#candidates + 1] = { -priority, ready_member(tonumber(due[i + 1]), id), base, id, q }
        sorted = false
      elseif stored then
        -- Unsortable, so it cannot wait for its turn: buried at once.
        redis.call('ZREM', base .. 'scheduled', id)
        local reason = 'job ' .. id .. ' is corrupt in storage: ' .. unusable('priority', stored) .. ' (found when it was due)'
        bury_corrupt(base, key, id, int(redis.call('HGET', key, 'attempts') or 0), now, reason)
        buried[#buried + 1] = { 'corrupt', id, reason }
      end
    end
    local top = redis.call('ZRANGE', base .. 'ready', 0, qlimit - 1, 'WITHSCORES')
    for i = 1, #top, 2 do
      candidates[#candidates + 1] = { tonumber(top[i + 1]), top[i], base, false, q }
    end
  end
end
if not sorted then
  table.sort(candidates, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    return x[2] < y[2]
  end)
end

local expires = now + lease
local expires_s = fmt(expires)
local index = {}
for q = 1, #KEYS do
  index[q] = fmt(q)
end
local out = buried
local removed = {}
local leased = {}
local taken = {}
for _, c in ipairs(candidates) do
  if #out >= limit then break end
  local member, base, q = c[2], c[3], c[5]
  -- a queue's candidates past its allowance are left as they are
  if (taken[q] or 0) < allow[q] then
    taken[q] = (taken[q] or 0) + 1
    local id = string.sub(member, 21)
    local key = job_key(base, id)
    if c[4] then
      redis.call('ZREM', base .. 'scheduled', id)
    elseif not popped then
      local r = removed[base]
      if not r then r = {}; removed[base] = r end
      r[#r + 1] = member
    end
    -- ready holds Pending jobs only, scheduled Scheduled ones (every script
    -- keeps it so). One HMGET reads what the client cannot know; the client
    -- adds id, queue, state and the lease, which it sent or computed.
    local f = redis.call('HMGET', key, 'kind', 'payload', 'priority', 'max_attempts', 'run_at', 'created_at',
      'attempts', 'errors', 'unique_key', 'trace')
    -- absent attempts: never claimed before, the common case
    local done_attempts = 0
    if f[7] then done_attempts = int(f[7]) end
    if f[1] and not done_attempts then
      local reason = 'job ' .. id .. ' is corrupt in storage: ' .. unusable('attempts', f[7]) .. ' (found when it was claimed)'
      bury_corrupt(base, key, id, 0, now, reason)
      out[#out + 1] = { 'corrupt', id, reason }
    elseif f[1] then
      local attempts = '1'
      if f[7] then attempts = fmt(done_attempts + 1) end
      f[7] = attempts
      redis.call('HSET', key, 'state', 'running', 'attempts', attempts, 'lease_token', token,
        'lease_worker', worker, 'lease_expires_at', expires_s)
      local l = leased[base]
      if not l then l = {}; leased[base] = l end
      l[#l + 1] = expires_s
      l[#l + 1] = id
      for i = 1, 10 do
        if not f[i] then f[i] = '' end
      end
      f[11] = id
      f[12] = index[q]
      out[#out + 1] = table.concat(f, '\0')
      if rated[q] then
        redis.call('ZADD', base .. 'starts', ARGV[1], token .. ':' .. id)
      end
    end
  end
end
for base, r in pairs(removed) do
  zrem_chunked(base .. 'ready', r)
end
for base, l in pairs(leased) do
  -- One claim's leases share a score, and its ids mostly ascend (UUIDv7,
  -- claimed in order), so they go in backwards: a small lease set is a
  -- listpack, which finds each new member's place by walking its run of
  -- equal scores, and ascending members made every insert walk all of it.
  local backwards = {}
  for i = #l - 1, 1, -2 do
    backwards[#backwards + 1] = l[i]
    backwards[#backwards + 1] = l[i + 1]
  end
  zadd_chunked(base .. 'leases', backwards)
end
return out
