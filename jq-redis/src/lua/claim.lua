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
-- ARGV[7]  the instant (microseconds) at or before which a claimer's entry
--          in `seen` is forgotten (now - SEEN_TTL, a day)
-- Queue controls (keys of the queue's base, so of its slot): `control`
-- (hash: paused_at, concurrency, rate_limit, rate_period in microseconds)
-- gives each queue an allowance: none while paused, at most concurrency
-- minus its Running jobs (ZCARD leases: expired leases hold their slot
-- until recover), at most rate_limit minus its starts in the window
-- (now - rate_period, now] (`starts`: a sorted set, score the start
-- instant from ARGV[1], never the server's TIME). A queue with no control
-- costs one HMGET. Candidates beyond a queue's allowance are not touched.
-- Each claim that meets a control records its worker in `seen`; at most
-- once an hour per queue (`seen_gc`, the next instant to look) it also
-- drops the entries of claimers last seen at or before ARGV[7], so the
-- names of pools long gone do not pile up.
--
-- Keyed jobs (schema.rs, "Keyed jobs"): a queue with an allowance costs one
-- EXISTS of its keyed sets more; one that holds a keyed Pending or
-- Scheduled job makes its due keyed Scheduled jobs Pending (run_at kept),
-- and the claim merges the plain candidates with each such queue's
-- rotation (rotations() in common/rotation.lua), recording the keys' Running
-- counts, starts under a rate, and the cursors it moved.
--
-- Returns one string per claimed job, in claim order (priority high to low,
-- then run_at, then id), its fields joined by "\0": kind, payload,
-- priority, max_attempts, run_at, created_at, attempts (after this claim),
-- errors, unique_key, trace, id, queue index (1-based into KEYS), and for
-- a keyed job its key and "k". An absent
-- field is "" (no field has "" as a value) and none holds a "\0" (names
-- refuse control characters, JSON text escapes them). One string rather
-- than an array: Redis converts each array element between Lua and the
-- reply, about 900 instructions apiece. State, token, worker and expiry are
-- what the client sent. A candidate whose stored priority or
-- attempts is not an integer is moved to Dead with the reason instead (see
-- int() in common/base.lua) and returned as { "corrupt", id, reason } in its
-- place.
--
-- A claim that takes fewer than `limit` jobs while an asked, unpaused
-- queue still holds a claimable one ends its reply with { "limited", v }:
-- what held them back (docs/CONTRACT.md, claim): v is "c" when a
-- concurrency limit did (the queue's Running jobs at its concurrency, or a
-- key at its own, limited_by in common.lua), else the earliest instant
-- (microseconds) a full rate window that held them back has room again.

local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local worker = ARGV[4]
local due_bound = tonumber(ARGV[5])
local token = ARGV[6]

-- each queue's allowance, and whether its starts are logged
local allow = {}
local rated = {}
-- each queue's control as read (paused_at, concurrency, rate_limit, rate_period)
local ctl = {}
for q = 1, #KEYS do
  local base = KEYS[q]
  local c = redis.call('HMGET', base .. 'control', 'paused_at', 'concurrency', 'rate_limit', 'rate_period')
  ctl[q] = c
  local a = limit
  if c[1] or c[2] or c[3] then
    record_seen(base, worker, now, c[1], tonumber(ARGV[7]))
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

-- Keyed jobs (schema.rs): a queue with an allowance costs one EXISTS more,
-- which tells whether it holds a keyed Pending or Scheduled job; only then
-- does the claim walk its rotation (keyed_claim below).
local keyed = {}
local any_keyed = false
for q = 1, #KEYS do
  if allow[q] > 0 and redis.call('EXISTS', KEYS[q] .. 'kwait', KEYS[q] .. 'kscheduled') > 0 then
    keyed[q] = true
    any_keyed = true
  end
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
    if #KEYS == 1 and #due == 0 and not any_keyed then
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
      local stored = read_body(base, id).priority
      local priority = int(stored)
      if priority then
        candidates[#candidates + 1] = { -priority, ready_member(tonumber(due[i + 1]), id), base, id, q }
        sorted = false
      else
        -- Unsortable, so it cannot wait for its turn: buried at once.
        redis.call('ZREM', base .. 'scheduled', id)
        local st = read_state(base, id)
        if st then
          local reason = 'job ' .. id .. ' is corrupt in storage: ' .. unusable('priority', stored) .. ' (found when it was due)'
          bury_corrupt(base, id, st, int(st.attempts), now, reason)
          buried[#buried + 1] = { 'corrupt', id, reason }
        end
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
-- The candidates taken, per queue index: (id, position in claim order)
-- pairs, and the members to remove from ready when they were not popped
-- already.
local picked = {}
local removed = {}
local count = 0
for q = 1, #KEYS do
  picked[q] = {}
end
local taken = {}
-- Takes plain candidate `c`.
local function take_plain(c)
  local member, base, q = c[2], c[3], c[5]
  taken[q] = (taken[q] or 0) + 1
  count = count + 1
  local id = c[4] or string.sub(member, 21)
  if c[4] then
    redis.call('ZREM', base .. 'scheduled', id)
  elseif not popped then
    local r = removed[q]
    if not r then r = {}; removed[q] = r end
    r[#r + 1] = member
  end
  local p = picked[q]
  p[#p + 1] = id
  p[#p + 1] = count
end
-- the key of each keyed job taken, by its place in claim order, and per
-- queue index the keys whose limits have a rate (their starts are logged)
local key_at, key_rated = {}, {}
-- per queue index: its rotation (keyed queues only)
local rot = {}
if not any_keyed then
  for _, c in ipairs(candidates) do
    if count >= limit then break end
    -- a queue's candidates past its allowance are left as they are
    if (taken[c[5]] or 0) < allow[c[5]] then take_plain(c) end
  end
else
  -- The merge of the plain candidates (in claim order) with each keyed
  -- queue's rotation (docs/CONTRACT.md, "Keyed jobs"; the reference model
  -- is jq-testkit's memory/keys.rs): the smallest of the streams' next
  -- jobs by (priority desc, effective run_at, plain before keyed, queue
  -- name; KEYS are in queue name order), where a rotation job's effective
  -- run_at is the latest run_at its rotation yielded at that priority in
  -- this claim.
  local K = rotations()
  for q = 1, #KEYS do
    if keyed[q] then
      local base = KEYS[q]
      key_rated[q] = {}
      -- due keyed Scheduled jobs are claimable: Pending now, run_at kept
      -- (what promote does), so the rotation holds every claimable job
      local due = redis.call('ZRANGEBYSCORE', base .. 'kscheduled', '-inf', ARGV[1], 'LIMIT', '0', ARGV[5])
      for _, id in ipairs(due) do
        redis.call('ZREM', base .. 'kscheduled', id)
        local reason = promote_due(base, id, now)
        if reason then buried[#buried + 1] = { 'corrupt', id, reason } end
      end
      rot[q] = K.open(base, limit, now, false)
    end
  end
  -- keyed job `id` (key `key`) taken from queue index q
  local function take_keyed(q, key, id)
    taken[q] = (taken[q] or 0) + 1
    count = count + 1
    key_at[count] = key
    local p = picked[q]
    p[#p + 1] = id
    p[#p + 1] = count
  end
  -- one queue with no plain job to take: nothing to merge
  if not (#KEYS == 1 and #candidates == 0 and K.take_singles(rot[1], math.min(limit, allow[1]), take_keyed)) then
    K.merge(candidates, rot, #KEYS, limit, function(q) return (taken[q] or 0) < allow[q] end, take_plain,
      function(q, key, member, rated)
        if rated then key_rated[q][key] = true end
        take_keyed(q, key, string.sub(member, 21))
      end)
  end
  for q = 1, #KEYS do
    if rot[q] then K.finish(rot[q]) end
  end
end
for q, r in pairs(removed) do
  zrem_chunked(KEYS[q] .. 'ready', r)
end

-- ready and scheduled hold Pending and Scheduled jobs only (every script
-- keeps them so), so a candidate's state is not checked. One HMGET per
-- hash reads the batch, one HSET leases it; the client adds the state and
-- the lease, which it sent.
local find, sub, byte = string.find, string.sub, string.byte
local rows = {}
local head = 'running\0'
local tail = '\0' .. expires_s .. '\0' .. token .. '\0' .. worker .. '\0'
for q = 1, #KEYS do
  local p = picked[q]
  if #p > 0 then
    local ids, at = {}, {}
    for i = 1, #p, 2 do
      ids[#ids + 1] = p[i]
      at[#at + 1] = p[i + 1]
    end
    local base = KEYS[q]
    local bodies = hmget_chunked(base .. 'jobs', ids)
    local states = hmget_chunked(base .. 'states', ids)
    local errors = hmget_chunked(base .. 'errors', ids)
    -- most queues have no job with extra fields (timeout, cancel request,
    -- progress): one EXISTS spares them the HMGET
    local extras = {}
    if redis.call('EXISTS', base .. 'extra') == 1 then extras = hmget_chunked(base .. 'extra', ids) end
    local writes = {}
    local leased = {}
    -- key -> its jobs leased here, and those keys in order (their Running
    -- count is written once per key below)
    local krun, kkeys = {}, {}
    local qi = fmt(q)
    for i = 1, #ids do
      local id = ids[i]
      local body, state = bodies[i], states[i]
      -- a job that is not stored (an index entry left by a foreign
      -- writer) is dropped from the index and skipped
      if state and not body then
        local st = read_state(base, id)
        local reason = 'job ' .. id .. ' is corrupt in storage: field kind is missing (found when it was claimed)'
        bury_corrupt(base, id, st, int(st.attempts), now, reason)
        rows[at[i]] = { 'corrupt', id, reason }
      elseif state then
        -- attempts and, as one piece, "\0<run_at>\0<unique_key>": plain
        -- finds, several times cheaper than a Lua pattern here
        local p1 = find(state, '\0', 1, true)
        local p2 = p1 and find(state, '\0', p1 + 1, true)
        local p3 = p2 and find(state, '\0', p2 + 1, true)
        local p4 = p3 and find(state, '\0', p3 + 1, true)
        local attempts, middle, done_attempts
        if p4 then
          attempts = sub(state, p1 + 1, p2 - 1)
          middle = sub(state, p2, p4 - 1)
          done_attempts = 0
          if attempts ~= '0' then done_attempts = int(attempts) end
        end
        if not done_attempts then
          local st = read_state(base, id)
          local reason = 'job ' .. id .. ' is corrupt in storage: ' .. unusable('attempts', st.attempts)
            .. ' (found when it was claimed)'
          bury_corrupt(base, id, st, 0, now, reason)
          rows[at[i]] = { 'corrupt', id, reason }
        else
          local now_attempts = '1'
          if done_attempts > 0 then now_attempts = fmt(done_attempts + 1) end
          writes[#writes + 1] = id
          -- A Pending or Scheduled job's lease fields are empty: its value
          -- ends 3 NULs after p4, then finished_at ("") and, for a
          -- workflow step only, "\0" and its flow (common/base.lua), kept
          -- and counted in its workflow's summary.
          -- a job the rotation took (only those are keyed)
          local key = key_at[at[i]]
          if key and find(state, '\0\0', p4 + 4, true) == p4 + 4 then
            -- a keyed job of no workflow: its value ends with "\0\0" and
            -- its key after the lease fields (the key the rotation read:
            -- no substring to make)
            writes[#writes + 1] = head .. now_attempts .. middle .. tail .. '\0\0' .. key
          elseif #state > p4 + 3 then
            -- a step's empty finished_at: its flow starts 5 bytes on
            local flow = byte(state, p4 + 4) == 0 and sub(state, p4 + 5)
              or string.match(sub(state, p4 + 4), '^%Z*%z(.*)$')
            -- a keyed job's key follows its flow ("" when no step)
            local p9 = key and flow and find(flow, '\0', 1, true)
            if p9 then flow = sub(flow, 1, p9 - 1) end
            if flow and flow ~= '' then
              (flow_lib or workflows()).later(base, flow, sub(state, 1, p1 - 1), 'running')
            end
            if key then
              writes[#writes + 1] = head .. now_attempts .. middle .. tail .. '\0' .. flow .. '\0' .. key
            elseif flow and flow ~= '' then
              writes[#writes + 1] = head .. now_attempts .. middle .. tail .. '\0' .. flow
            else
              writes[#writes + 1] = head .. now_attempts .. middle .. tail
            end
          else
            writes[#writes + 1] = head .. now_attempts .. middle .. tail
          end
          if key then
            -- its key's Running count and, under a rate, its start
            local n = krun[key]
            if n then
              krun[key] = n + 1
            else
              krun[key] = 1
              kkeys[#kkeys + 1] = key
            end
            if key_rated[q] and key_rated[q][key] then
              redis.call('ZADD', base .. 'kstarts:' .. key, ARGV[1], token .. ':' .. id)
            end
          end
          leased[#leased + 1] = expires_s
          leased[#leased + 1] = id
          -- a keyed job's row ends with its key and "k" (claim.rs tells a
          -- keyed row from a field holding a NUL by that last field)
          -- (one concatenation either way: the row is built once)
          if key then
            rows[at[i]] = body .. '\0' .. now_attempts .. middle .. '\0' .. (errors[i] or '')
              .. '\0' .. (extras[i] or '\0\0\0') .. '\0' .. id .. '\0' .. qi .. '\0' .. key .. '\0k'
          else
            rows[at[i]] = body .. '\0' .. now_attempts .. middle .. '\0' .. (errors[i] or '')
              .. '\0' .. (extras[i] or '\0\0\0') .. '\0' .. id .. '\0' .. qi
          end
          if rated[q] then
            redis.call('ZADD', base .. 'starts', ARGV[1], token .. ':' .. id)
          end
        end
      end
    end
    hset_chunked(base .. 'states', writes)
    -- the keys' Running counts: the count the rotation read before this
    -- claim plus the jobs leased (nothing else in this script moves them),
    -- one HSET for the claim rather than an HINCRBY per job
    if rot[q] then
      -- and the field '' (no key is empty), whose long value keeps the
      -- hash a hashtable (HASHTABLE in common/base.lua): the claim, the ack
      -- batch and the next claim look up tens of keys in it at a time,
      -- each a walk of the whole hash while it is a listpack
      local counts = { '', HASHTABLE }
      local run0 = rot[q].run0
      for k = 1, #kkeys do
        local key = kkeys[k]
        counts[#counts + 1] = key
        local total = run0[key] + krun[key]
        -- (a key at a limit of one counts 1: no string.format)
        counts[#counts + 1] = total == 1 and '1' or fmt(total)
      end
      hset_chunked(base .. 'krun', counts)
    end
    -- One claim's leases share a score, and its ids mostly ascend (UUIDv7,
    -- claimed in order), so they go in backwards: a small lease set is a
    -- listpack, which finds each new member's place by walking its run of
    -- equal scores, and ascending members made every insert walk all of it.
    local backwards = {}
    for i = #leased - 1, 1, -2 do
      backwards[#backwards + 1] = leased[i]
      backwards[#backwards + 1] = leased[i + 1]
    end
    zadd_chunked(base .. 'leases', backwards)
  end
end
-- the workflow steps' counts, once per summary and state (F.later)
if flow_lib then flow_lib.flush(now) end
local out = buried
for pos = 1, count do
  if rows[pos] then out[#out + 1] = rows[pos] end
end
-- Short: what held back the claimable jobs left (see the header), read
-- from what the claim left (its leases and starts written above).
if count < limit then
  local limited
  local function held(v)
    if not v then return end
    if v == 'c' or limited == 'c' then
      limited = 'c'
    elseif not limited or v < limited then
      limited = v
    end
  end
  for q = 1, #KEYS do
    local base, c = KEYS[q], ctl[q]
    if not c[1] then
      local by_queue
      if c[2] and redis.call('ZCARD', base .. 'leases') >= tonumber(c[2]) then
        by_queue = 'c'
      elseif c[3] and c[4] and redis.call('ZCARD', base .. 'starts') >= tonumber(c[3]) then
        local first = redis.call('ZRANGE', base .. 'starts', '0', '0', 'WITHSCORES')[2]
        by_queue = (tonumber(first) or now) + tonumber(c[4])
      end
      if by_queue then
        if redis.call('ZCARD', base .. 'ready') > 0 or redis.call('EXISTS', base .. 'kwait') == 1
          or #redis.call('ZRANGEBYSCORE', base .. 'scheduled', '-inf', ARGV[1], 'LIMIT', '0', '1') > 0
          or #redis.call('ZRANGEBYSCORE', base .. 'kscheduled', '-inf', ARGV[1], 'LIMIT', '0', '1') > 0 then
          held(by_queue)
        end
      elseif rot[q] and redis.call('EXISTS', base .. 'kwait') == 1 then
        held(rotations().held(rot[q]))
      end
    end
  end
  if limited then out[#out + 1] = { 'limited', limited == 'c' and 'c' or fmt(limited) } end
end
return out
