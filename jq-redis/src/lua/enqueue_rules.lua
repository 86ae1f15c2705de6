-- enqueue_rules.lua: stores a batch of which some jobs have a unique rule
-- (debounce, unique for a period, replace: the contract's "Unique
-- rules"), atomically, in batch order. A job without a rule is stored as
-- enqueue.lua stores it (store_jobs); a job with one is decided as
-- jq_core::storage::decide decides, over its key's holders: the live ones
-- (`unique`) and, for a period, those created within it (`ucreated`,
-- core.lua). enqueue.rs sends a batch here only when a job has a rule, so
-- enqueue.lua and enqueue_one.lua stay as they were.
--
-- KEYS[q]  base of the q-th queue of the batch
-- ARGV[1]  wake-up channel (PUBLISHed when a job became Pending)
-- ARGV[2]  now (microseconds, the storage's clock)
-- then per job PER_JOB values (store.lua; for a debounce packed with the
-- run_at a new job gets, now + min(window, max_delay)), then RULE values:
-- the rule ("" none, "debounce", "period", "replace"), its window or
-- period (microseconds), the debounce's max_delay ("" none), the run_at a
-- replace gives (the job's, or now), and the payload an update gives.
-- Returns one value per job: "" when stored, else the id answered.

local RULE = 5
local PER = PER_JOB + RULE
local channel, now = ARGV[1], tonumber(ARGV[2])
local woke = false

local function live(state)
  return state == 'scheduled' or state == 'pending' or state == 'running'
end

-- The holders of unique key `uk` a rule needs: every live one, and with
-- `since` every job of the key created after it; { id, state, created }.
local function holders(base, uk, since)
  local out, seen = {}, {}
  local v = redis.call('HGET', base .. 'unique', uk)
  if v then
    for hid in string.gmatch(v, '[^,]+') do
      local st = read_state(base, hid)
      if st and live(st.state) then
        out[#out + 1] = { id = hid, state = st.state, created = int(read_body(base, hid).created_at) or 0 }
        seen[hid] = true
      end
    end
  end
  if since then
    local from = '[' .. ucreated_member(uk, fmt(math.max(since + 1, 0)), '')
    for _, m in ipairs(redis.call('ZRANGEBYLEX', base .. 'ucreated', from, '(' .. uk .. '\1')) do
      local hid = string.sub(m, -32)
      if not seen[hid] then
        local st = read_state(base, hid)
        if st then
          out[#out + 1] = { id = hid, state = st.state, created = tonumber(string.sub(m, #uk + 2, #uk + 21)) }
          seen[hid] = true
        end
      end
    end
  end
  return out
end

-- The waiting job `id` takes `payload` and `run_at` (Pending when due).
local function update(base, id, payload, run_at)
  local st = read_state(base, id)
  local b = read_body(base, id)
  b.payload = payload
  write_body(base, id, b)
  unindex(base, id, st)
  if run_at <= now then
    make_pending(base, id, st, b.priority, run_at)
    woke = true
  else
    make_scheduled(base, id, st, run_at)
  end
end

-- Stores the job of `values` (PER_JOB values, queue index 1) with unique
-- key `uk` beside any live holder: store_jobs without its unique check,
-- then the key's indexes.
local function store_beside(base, values, uk)
  values[5] = ''
  store_jobs({ base }, channel, values, 0)
  unique_take(base, uk, values[1])
  redis.call('ZADD', base .. 'ucreated', 0, ucreated_member(uk, body_created(values[3]), values[1]))
end

local result = {}
local n = (#ARGV - 2) / PER
for j = 1, n do
  local a = 2 + (j - 1) * PER
  local values = {}
  for k = 1, PER_JOB do values[k] = ARGV[a + k] end
  local base = KEYS[tonumber(values[2])]
  values[2] = '1'
  local id, uk, rule = values[1], values[5], ARGV[a + PER_JOB + 1]
  if rule == '' then
    result[j] = store_jobs({ base }, channel, values, 0)[1]
  elseif redis.call('HEXISTS', base .. 'states', id) == 1 then
    result[j] = id -- a resend: the stored job stays as it is
  else
    local span = tonumber(ARGV[a + PER_JOB + 2])
    if rule == 'period' then
      local since = now - span
      local best
      for _, h in ipairs(holders(base, uk, since)) do
        if (live(h.state) or h.created > since) and (not best or h.id < best) then best = h.id end
      end
      if best then
        result[j] = best
      else
        store_beside(base, values, uk)
        result[j] = ''
      end
    else
      local waiting
      for _, h in ipairs(holders(base, uk, nil)) do
        if (h.state == 'scheduled' or h.state == 'pending') and (not waiting or h.id < waiting.id) then waiting = h end
      end
      if waiting then
        local run_at
        if rule == 'debounce' then
          run_at = now + span
          local max = ARGV[a + PER_JOB + 3]
          if max ~= '' then run_at = math.min(run_at, waiting.created + tonumber(max)) end
        else
          run_at = tonumber(ARGV[a + PER_JOB + 4])
        end
        update(base, waiting.id, ARGV[a + PER_JOB + 5], run_at)
        result[j] = waiting.id
      else
        store_beside(base, values, uk)
        result[j] = ''
      end
    end
  end
end
if woke then
  redis.call('PUBLISH', channel, '1')
end
return result
