-- common/store.lua: store_jobs, the storing of new jobs for enqueue.lua and
-- fire.lua (the library's last part, after moves.lua; enqueue.lua's
-- library is core.lua and this part alone, so it uses only what core.lua
-- defines).

-- Values per job in the arguments of store_jobs, all computed by the
-- client so that the loop only moves strings: id (32 hex), queue index
-- (1-based into the bases), the packed `jobs` value, the packed `states`
-- value (Scheduled or Pending, attempts 0; a keyed job's with its key,
-- schema.rs), unique key ("" = none), the index the job goes to (`ready`,
-- `scheduled`, `kwait` or `kscheduled`), its score and member there, and
-- the timeout in milliseconds ("" = none).
local PER_JOB = 9

-- Stores new jobs as enqueue.lua describes (one place for enqueue.lua and
-- fire.lua): `bases` per queue index, `channel` PUBLISHed once when a job
-- became Pending, and PER_JOB values per job in `args` from index `first` +
-- 1 on. Returns one value per job: "" when stored, else the id of the job
-- answered instead: the same id when it is stored already (a resend), or
-- the live job of its queue with its unique key.
local function store_jobs(bases, channel, args, first)
  local n = (#args - first) / PER_JOB
  -- per queue index: the batch's ids, to learn in one HMGET which exist
  local asked = {}
  for q = 1, #bases do asked[q] = {} end
  for j = 0, n - 1 do
    local a = first + j * PER_JOB
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
  -- per index (ready, ...) and for ids, the keyed Pending jobs stored
  local bodies, states, indexes, ids, kwaiting = {}, {}, {}, {}, {}
  for q = 1, #bases do
    bodies[q], states[q], indexes[q], ids[q], kwaiting[q] = {}, {}, {}, {}, 0
    if fresh[q] then
      bodies[q][1], bodies[q][2] = '', HASHTABLE
      states[q][1], states[q][2] = '', HASHTABLE
    end
  end
  local result = {}
  local woke = false
  for j = 0, n - 1 do
    local a = first + j * PER_JOB
    local id, qi, uk = args[a + 1], tonumber(args[a + 2]), args[a + 5]
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
      local index = args[a + 6]
      local pending = index == 'ready' or index == 'kwait'
      k[id] = pending and 'pending' or 'scheduled'
      local t = bodies[qi]
      t[#t + 1] = id
      t[#t + 1] = args[a + 3]
      t = states[qi]
      t[#t + 1] = id
      t[#t + 1] = args[a + 4]
      if args[a + 9] ~= '' then
        redis.call('HSET', base .. 'extra', id, args[a + 9] .. '\0\0\0')
      end
      if uk ~= '' then
        redis.call('HSET', base .. 'unique', uk, id)
      end
      if pending then
        woke = true
        if index == 'kwait' then kwaiting[qi] = kwaiting[qi] + 1 end
      end
      t = indexes[qi][index]
      if not t then
        t = {}
        indexes[qi][index] = t
      end
      t[#t + 1] = args[a + 7]
      t[#t + 1] = args[a + 8]
      t = ids[qi]
      t[#t + 1] = '0'
      t[#t + 1] = id
    end
  end
  for q = 1, #bases do
    local base = bases[q]
    hset_chunked(base .. 'jobs', bodies[q])
    hset_chunked(base .. 'states', states[q])
    for index, pairs_ in pairs(indexes[q]) do
      zadd_chunked(base .. index, pairs_)
    end
    zadd_chunked(base .. 'ids', ids[q])
    if kwaiting[q] > 0 then
      redis.call('INCRBY', base .. 'kpending', fmt(kwaiting[q]))
    end
  end
  if woke then
    redis.call('PUBLISH', channel, '1')
  end
  return result
end
