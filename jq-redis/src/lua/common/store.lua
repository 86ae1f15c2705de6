-- common/store.lua: store_jobs, the storing of new jobs for enqueue.lua and
-- fire.lua (the library's last part, after moves.lua; enqueue.lua's
-- library is core.lua and this part alone, so it uses only what core.lua
-- defines).

-- A queue's `ucreated` sorted set holds every stored job with a unique
-- key (score 0, member `<unique key>\0<created_at, 20 digits><id>`), in
-- any state until purged: the unique period reads a key's jobs created
-- within it with one ZRANGEBYLEX (the contract's "Unique rules"). Jobs
-- without a unique key are not in it. (Here, not in core.lua: a lone
-- job's enqueue_one.lua runs only core.lua's definitions.)

-- The member of job `id` with unique key `uk`, created at `created` (the
-- integer microseconds as text).
local function ucreated_member(uk, created, id)
  return uk .. '\0' .. string.rep('0', 20 - #created) .. created .. id
end

-- The created_at of a packed `jobs` value (its fifth field; a payload
-- holds no NUL: JSON text escapes control characters, and enqueue refuses
-- \u0000).
local function body_created(body)
  local i = 0
  for _ = 1, 4 do i = string.find(body, '\0', i + 1, true) end
  local j = string.find(body, '\0', i + 1, true)
  return string.sub(body, i + 1, j - 1)
end

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
-- the live job of its queue with its unique key. The jobs are stored one
-- queue after the other, each queue's in batch order (a unique key is
-- taken by the first of them); the loop over a queue's jobs keeps its
-- tables in locals and counts their lengths itself (Lua's # is a search).
local function store_jobs(bases, channel, args, first)
  local n = (#args - first) / PER_JOB
  -- queue index (as the client wrote it) -> queue number, so the loop
  -- never converts a string (tonumber costs a strtod)
  local number = {}
  for q = 1, #bases do number[fmt(q)] = q end
  -- per queue: the positions (1-based) of its jobs in the batch
  local mine = {}
  for q = 1, #bases do mine[q] = {} end
  for j = 1, n do
    local t = mine[number[args[first + (j - 1) * PER_JOB + 2]]]
    t[#t + 1] = j
  end
  local result = {}
  local woke = false
  for q = 1, #bases do
    local base, at = bases[q], mine[q]
    local m = #at
    if m > 0 then
      -- which of the queue's ids exist, in one HMGET (and whether its
      -- hashes hold the HASHTABLE field: field '' last)
      local ids = {}
      for i = 1, m do ids[i] = args[first + (at[i] - 1) * PER_JOB + 1] end
      ids[m + 1] = ''
      local got = hmget_chunked(base .. 'states', ids)
      -- id -> state of the jobs stored (or stored by this batch)
      local known = {}
      for i = 1, m do
        if got[i] then known[ids[i]] = string.match(got[i], '^%Z*') end
      end
      -- HSET arguments for jobs and states, ZADD arguments per index
      -- (ready, ...) and for ids
      local bodies, states, indexes, members = {}, {}, {}, {}
      local nb, nm, kwaiting = 0, 0, 0
      if not got[m + 1] then
        -- the queue's hashes are new (or were deleted from outside)
        bodies[1], bodies[2], states[1], states[2] = '', HASHTABLE, '', HASHTABLE
        nb = 2
      end
      for i = 1, m do
        local j = at[i]
        local a = first + (j - 1) * PER_JOB
        local id, uk = ids[i], args[a + 5]
        local existing = false
        if known[id] then
          existing = id
        elseif uk ~= '' then
          local other = unique_holder(base, uk)
          if other then
            local st = known[other]
            if st == nil then
              local v = redis.call('HGET', base .. 'states', other)
              st = v and string.match(v, '^%Z*') or false
              known[other] = st
            end
            if st == 'scheduled' or st == 'pending' or st == 'running' then
              existing = other
            end
          end
        end
        if existing then
          result[j] = existing
        else
          result[j] = ''
          local index = args[a + 6]
          if index == 'ready' or index == 'kwait' then
            woke = true
            known[id] = 'pending'
            if index == 'kwait' then kwaiting = kwaiting + 1 end
          else
            known[id] = 'scheduled'
          end
          bodies[nb + 1], bodies[nb + 2] = id, args[a + 3]
          states[nb + 1], states[nb + 2] = id, args[a + 4]
          nb = nb + 2
          local t = indexes[index]
          if not t then
            t = {}
            indexes[index] = t
          end
          local c = #t
          t[c + 1], t[c + 2] = args[a + 7], args[a + 8]
          members[nm + 1], members[nm + 2] = '0', id
          nm = nm + 2
          if args[a + 9] ~= '' then
            redis.call('HSET', base .. 'extra', id, args[a + 9] .. '\0\0\0')
          end
          if uk ~= '' then
            redis.call('HSET', base .. 'unique', uk, id)
            redis.call('ZADD', base .. 'ucreated', 0, ucreated_member(uk, body_created(args[a + 3]), id))
          end
        end
      end
      hset_chunked(base .. 'jobs', bodies)
      hset_chunked(base .. 'states', states)
      for index, pairs_ in pairs(indexes) do
        zadd_chunked(base .. index, pairs_)
      end
      zadd_chunked(base .. 'ids', members)
      if kwaiting > 0 then
        redis.call('INCRBY', base .. 'kpending', fmt(kwaiting))
      end
    end
  end
  if woke then
    redis.call('PUBLISH', channel, '1')
  end
  return result
end
