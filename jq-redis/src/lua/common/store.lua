-- common/store.lua: store_jobs, the storing of new jobs for enqueue.lua and
-- fire.lua (the library's last part, after moves.lua).

-- Stores new jobs as enqueue.lua describes (one place for enqueue.lua and
-- fire.lua): `bases` per queue index, `now` their created_at, `channel`
-- PUBLISHed once when a job became Pending, and 12 values per job in
-- `args` from index `first` + 1 on. Returns one value per job: "" when
-- stored, else the id of the job answered instead: the same id when it is
-- stored already (a resend), or the live job of its queue with its unique
-- key.
local function store_jobs(bases, now, channel, args, first)
  local n = (#args - first) / 12
  -- per queue index: the batch's ids, to learn in one HMGET which exist
  local asked = {}
  for q = 1, #bases do asked[q] = {} end
  for j = 0, n - 1 do
    local a = first + j * 12
    local t = asked[tonumber(args[a + 2])]
    t[#t + 1] = args[a + 1]
  end
  -- per queue index: id -> state of the jobs stored (or stored by this batch)
  local known = {}
  -- per queue index: true when its hashes lack the HASHTABLE field
  local fresh = {}
  for q = 1, #bases do
    local k = {}
    local n_asked = #asked[q]
    if n_asked > 0 then
      asked[q][n_asked + 1] = ''
      local states = hmget_chunked(bases[q] .. 'states', asked[q])
      for i = 1, n_asked do
        if states[i] then k[asked[q][i]] = string.match(states[i], '^%Z*') end
      end
      -- the queue's hashes are new (or were deleted from outside)
      fresh[q] = not states[n_asked + 1]
    end
    known[q] = k
  end
  -- per queue index: HSET arguments for jobs and states, ZADD arguments
  -- for ready, scheduled, ids, kwait and kscheduled
  local bodies, states, ready, scheduled, ids, kwait, kscheduled = {}, {}, {}, {}, {}, {}, {}
  for q = 1, #bases do
    bodies[q], states[q], ready[q], scheduled[q], ids[q], kwait[q], kscheduled[q] = {}, {}, {}, {}, {}, {}, {}
    if fresh[q] then
      bodies[q][1], bodies[q][2] = '', HASHTABLE
      states[q][1], states[q][2] = '', HASHTABLE
    end
  end
  local result = {}
  local woke = false
  for j = 0, n - 1 do
    local a = first + j * 12
    local id, qi, uk = args[a + 1], tonumber(args[a + 2]), args[a + 8]
    local key = args[a + 12]
    local base = bases[qi]
    local k = known[qi]
    local existing = false
    if k[id] then
      existing = id
    elseif uk ~= '' then
      local other = unique_holder(base, uk)
      if other then
        local st = k[other]
        if st == nil then
          local v = redis.call('HGET', base .. 'states', other)
          st = v and string.match(v, '^%Z*') or false
          k[other] = st
        end
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
      k[id] = state
      local t = bodies[qi]
      t[#t + 1] = id
      t[#t + 1] = args[a + 3] .. '\0' .. args[a + 4] .. '\0' .. priority .. '\0' .. args[a + 7] .. '\0' .. now .. '\0'
        .. args[a + 10]
      t = states[qi]
      t[#t + 1] = id
      t[#t + 1] = state .. '\0' .. '0\0' .. run_at .. '\0' .. uk .. '\0\0\0\0'
      if key ~= '' then t[#t] = t[#t] .. '\0\0' .. key end
      if args[a + 11] ~= '' then
        redis.call('HSET', base .. 'extra', id, args[a + 11] .. '\0\0\0')
      end
      if uk ~= '' then
        redis.call('HSET', base .. 'unique', uk, id)
      end
      if key ~= '' then
        -- a keyed job: its key's sets, never the plain ones
        if member ~= '' then
          woke = true
          t = kwait[qi]
          t[#t + 1] = '0'
          t[#t + 1] = kwait_member(tonumber(priority), key, member)
        else
          t = kscheduled[qi]
          t[#t + 1] = run_at
          t[#t + 1] = id
        end
      elseif member ~= '' then
        woke = true
        t = ready[qi]
        t[#t + 1] = fmt(-tonumber(priority))
        t[#t + 1] = member
      else
        t = scheduled[qi]
        t[#t + 1] = run_at
        t[#t + 1] = id
      end
      t = ids[qi]
      t[#t + 1] = '0'
      t[#t + 1] = id
    end
  end
  for q = 1, #bases do
    local base = bases[q]
    hset_chunked(base .. 'jobs', bodies[q])
    hset_chunked(base .. 'states', states[q])
    zadd_chunked(base .. 'ready', ready[q])
    zadd_chunked(base .. 'scheduled', scheduled[q])
    zadd_chunked(base .. 'ids', ids[q])
    if #kwait[q] > 0 then
      zadd_chunked(base .. 'kwait', kwait[q])
      redis.call('INCRBY', base .. 'kpending', fmt(#kwait[q] / 2))
    end
    zadd_chunked(base .. 'kscheduled', kscheduled[q])
  end
  if woke then
    redis.call('PUBLISH', channel, '1')
  end
  return result
end
