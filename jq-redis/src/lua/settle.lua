-- settle.lua: applies a batch of fenced outcomes of claimed jobs.
--
-- KEYS[q]  base of each queue the batch touches
-- ARGV[1]  now (microseconds)
-- ARGV[2]  wake-up channel (PUBLISHed once when a job became Pending)
-- then 6 values per item:
--   queue index (1-based into KEYS), id (32 hex), lease token,
--   outcome ("ack" | "ackr" | "nack" | "bury" | "release" | "cancel"), error
--   message ("" for ack/release/cancel; the result JSON for "ackr", an ack
--   that stores a result in `results`), delay (microseconds; nack and
--   release)
-- Returns one value per item: the job's new state, or "lost" when the job is
-- unknown, not Running, or holds another token (nothing changed then). A
-- nack, bury or release of a job whose stored attempts (or, where the
-- outcome needs them, max_attempts or priority) is not an integer moves it
-- to Dead with that reason.
--
-- Acks, the hot path, cost no command of their own: the batch's states
-- are read with one HMGET per queue, and the new states and the index
-- moves (out of leases, into done:completed) written once per queue at the
-- end. Items are applied in order: a job already finished by an earlier
-- item of the batch is no longer Running for a later one.
--
-- Workflows: a step's count moves in its workflow's summary, and a step
-- with children releases or cancels them (`finished` of workflows() in common/workflows.lua) in
-- this same script, whichever outcome made it terminal. The acks' counts
-- and releases are written once for the batch, after the items (`later`,
-- `completed_later` and `flush` of workflows()).

local find, sub, byte = string.find, string.sub, string.byte
local now = tonumber(ARGV[1])
local now_s = ARGV[1]
local out = {}
local woke = false
local n = (#ARGV - 2) / 6

-- queue index as sent -> number, so no item pays for a tonumber (strtod)
local index = {}
for q = 1, #KEYS do
  index[fmt(q)] = q
end

-- per queue index: the batch's ids, then id -> state value as stored
local asked, cur = {}, {}
for q = 1, #KEYS do
  asked[q], cur[q] = {}, {}
end
for j = 0, n - 1 do
  local a = 2 + j * 6
  local t = asked[index[ARGV[a + 1]]]
  t[#t + 1] = ARGV[a + 2]
end
for q = 1, #KEYS do
  if #asked[q] > 0 then
    local values = hmget_chunked(KEYS[q] .. 'states', asked[q])
    local c = cur[q]
    for i, id in ipairs(asked[q]) do
      c[id] = values[i]
    end
  end
end

-- per queue index: ids leaving leases, ZADD arguments of done:completed,
-- HSET arguments of the acked jobs' states, key -> acked keyed jobs and
-- those keys as a list (their keys' Running counts go down once per key,
-- after the items)
local unleased, completed, acked, kacked, kkeys = {}, {}, {}, {}, {}
for q = 1, #KEYS do
  unleased[q], completed[q], acked[q] = {}, {}, {}
end
-- an acked keyed job of queue index qi and key `key`
local function acked_key(qi, key)
  local k = kacked[qi]
  if not k then
    k = {}
    kacked[qi], kkeys[qi] = k, {}
  end
  local n = k[key]
  if n then
    k[key] = n + 1
  else
    k[key] = 1
    local l = kkeys[qi]
    l[#l + 1] = key
  end
end

for j = 0, n - 1 do
  local a = 2 + j * 6
  local qi = index[ARGV[a + 1]]
  local base, id, token = KEYS[qi], ARGV[a + 2], ARGV[a + 3]
  local outcome = ARGV[a + 4]
  local v = cur[qi][id]
  -- the NULs ending state, attempts, run_at, unique_key, lease_expires_at
  -- and lease_token: plain finds, several times cheaper than a Lua pattern
  local p1 = v and find(v, '\0', 1, true)
  local p2 = p1 and sub(v, 1, p1 - 1) == 'running' and find(v, '\0', p1 + 1, true)
  local p3 = p2 and find(v, '\0', p2 + 1, true)
  local p4 = p3 and find(v, '\0', p3 + 1, true)
  local p5 = p4 and find(v, '\0', p4 + 1, true)
  local p6 = p5 and find(v, '\0', p5 + 1, true)
  if not p6 or sub(v, p5 + 1, p6 - 1) ~= token then
    out[j + 1] = 'lost'
  else
    local l = unleased[qi]
    l[#l + 1] = id
    if outcome == 'ack' or outcome == 'ackr' then
      local uk = sub(v, p3 + 1, p4 - 1)
      -- A Running job's value ends with its empty finished_at, so with a
      -- NUL, unless it is a workflow step's, which ends with a ninth field
      -- (common/base.lua): one byte tells, so a plain job's ack pays for no
      -- lookup.
      -- Its flow follows the value's eighth NUL (after lease_worker and
      -- finished_at); a value without one is a plain job's.
      local p8 = byte(v, -1) ~= 0 and find(v, '\0', (find(v, '\0', p6 + 1, true) or #v) + 1, true)
      if p8 and byte(v, p8 + 1) == 0 then
        -- a keyed job of no workflow: its value ends with "\0\0" and its
        -- key, kept as they are; its key's slot is free again
        local key = sub(v, p8 + 2)
        acked_key(qi, key)
        v = 'completed\0' .. sub(v, p1 + 1, p4) .. '\0\0\0' .. now_s .. sub(v, p8)
      elseif p8 then
        local flow = sub(v, p8 + 1)
        v = 'completed\0' .. sub(v, p1 + 1, p4) .. '\0\0\0' .. now_s .. '\0' .. flow
        -- a keyed job's key follows its flow ("" when it is no step):
        -- its key's slot is free again
        local p9 = find(flow, '\0', 1, true)
        if p9 then
          acked_key(qi, sub(flow, p9 + 1))
          flow = sub(flow, 1, p9 - 1)
        end
        if flow ~= '' then
          -- counted and released once for the batch, by F.flush below
          local F = flow_lib or workflows()
          F.later(base, flow, 'running', 'completed')
          if byte(flow) == 99 then -- "c": a step with children (F.completed_later)
            local k = #F.done_ids + 1
            F.done_bases[k], F.done_ids[k] = base, id
          end
        end
      else
        v = 'completed\0' .. sub(v, p1 + 1, p4) .. '\0\0\0' .. now_s
      end
      if outcome == 'ackr' then
        -- the result, stored with the ack (AckWith)
        redis.call('HSET', base .. 'results', id, ARGV[a + 5])
      end
      cur[qi][id] = v
      local t = acked[qi]
      t[#t + 1] = id
      t[#t + 1] = v
      t = completed[qi]
      t[#t + 1] = now_s
      t[#t + 1] = id
      unique_release(base, uk, id)
      out[j + 1] = 'completed'
    else
      local st = read_state(base, id)
      local b = read_body(base, id)
      local done_attempts, max_attempts, priority = int(st.attempts), int(b.max_attempts), int(b.priority)
      local message, delay = ARGV[a + 5], tonumber(ARGV[a + 6])
      local why
      if not done_attempts then
        why = unusable('attempts', st.attempts)
      elseif outcome == 'nack' and not max_attempts then
        why = unusable('max_attempts', b.max_attempts)
      elseif outcome ~= 'bury' and not priority then
        why = unusable('priority', b.priority)
      end
      local new
      if why then
        -- see int() in common/base.lua: the outcome cannot be applied as asked
        local reason = 'job ' .. id .. ' is corrupt in storage: ' .. why .. ' (found when its ' .. outcome
          .. ' was recorded)'
        if message ~= '' then reason = reason .. ': ' .. message end
        new = bury_corrupt(base, id, st, done_attempts or 0, now, reason)
      elseif outcome == 'nack' then
        append_error(base, id, done_attempts, now, message)
        if done_attempts >= max_attempts then
          new = make_terminal(base, id, st, 'dead', now)
        else
          new = requeue(base, id, st, priority, now, delay)
        end
      elseif outcome == 'bury' then
        append_error(base, id, done_attempts, now, message)
        new = make_terminal(base, id, st, 'dead', now)
      elseif outcome == 'cancel' then
        -- stopped on a stored cancel request: no error, no other attempt
        new = make_terminal(base, id, st, 'cancelled', now)
      else
        -- a release gives the attempt back
        st.attempts = fmt(done_attempts - 1)
        new = requeue(base, id, st, priority, now, delay)
      end
      cur[qi][id] = pack_state(st)
      if new == 'pending' then woke = true end
      out[j + 1] = new
    end
  end
end
for q = 1, #KEYS do
  local base = KEYS[q]
  hset_chunked(base .. 'states', acked[q])
  -- the acked keyed jobs' keys: their decrements wait for the end (no
  -- item reads them), one batch per queue
  if kacked[q] then krun_leave_many(base, kacked[q], kkeys[q]) end
  zrem_chunked(base .. 'leases', unleased[q])
  zadd_chunked(done_key(base, 'completed'), completed[q])
end
-- the workflow steps' counts and releases (flush of workflows()), in the
-- test the wake-up always made, so a batch of plain jobs runs no more
if (flow_lib and flow_lib.flush(now)) or woke then
  redis.call('PUBLISH', ARGV[2], '1')
end
return out
