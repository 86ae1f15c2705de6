-- complete.lua: applies a batch of fenced outcomes of claimed jobs.
--
-- KEYS[q]  base of each queue the batch touches
-- ARGV[1]  now (microseconds)
-- ARGV[2]  wake-up channel (PUBLISHed once when a job became Pending)
-- then 6 values per item:
--   queue index (1-based into KEYS), id (32 hex), lease token,
--   outcome ("ack" | "retry" | "fail" | "release"), error message ("" for
--   ack/release), delay (microseconds; retry and release)
-- Returns one value per item: the job's new state, or "lost" when the job is
-- unknown, not Running, or holds another token (nothing changed then). A
-- retry, fail or release of a job whose stored attempts (or, where the
-- outcome needs them, max_attempts or priority) is not an integer moves it
-- to Dead with that reason.
--
-- Per acked job this costs one HMGET and one HSET; the index moves (out of
-- leases, into done:<state>) are collected and written once per queue at
-- the end. The lease fields are left in the hash: they mean nothing once the
-- state is not running (see clear_lease in common.lua).

local now = tonumber(ARGV[1])
local now_s = ARGV[1]
local out = {}
local woke = false
-- per queue index: ids leaving leases; per queue index and state: ZADD args
local unleased, done = {}, {}
for q = 1, #KEYS do
  unleased[q] = {}
  done[q] = { completed = {}, dead = {} }
end

local function finish(base, qi, key, id, state, uk)
  redis.call('HSET', key, 'state', state, 'finished_at', now_s)
  local t = done[qi][state]
  t[#t + 1] = now_s
  t[#t + 1] = id
  unique_release(base, uk, id)
  return state
end

-- queue index as sent -> number, so no item pays for a tonumber (strtod)
local index = {}
for q = 1, #KEYS do
  index[fmt(q)] = q
end

local n = (#ARGV - 2) / 6
for j = 0, n - 1 do
  local a = 2 + j * 6
  local qi = index[ARGV[a + 1]]
  local base, id, token = KEYS[qi], ARGV[a + 2], ARGV[a + 3]
  local outcome = ARGV[a + 4]
  local key = base .. 'job:' .. id
  local f = redis.call('HMGET', key, 'state', 'lease_token', 'unique_key')
  if f[1] ~= 'running' or f[2] ~= token then
    out[j + 1] = 'lost'
  else
    local uk = f[3]
    local l = unleased[qi]
    l[#l + 1] = id
    local state
    if outcome == 'ack' then
      state = finish(base, qi, key, id, 'completed', uk)
    else
      local g = redis.call('HMGET', key, 'attempts', 'max_attempts', 'priority')
      local attempts, max_attempts, priority = int(g[1] or 0), int(g[2]), int(g[3])
      local message, delay = ARGV[a + 5], tonumber(ARGV[a + 6])
      local why
      if not attempts then
        why = unusable('attempts', g[1])
      elseif outcome == 'retry' and not max_attempts then
        why = unusable('max_attempts', g[2])
      elseif outcome ~= 'fail' and not priority then
        why = unusable('priority', g[3])
      end
      if why then
        -- see int() in common.lua: the outcome cannot be applied as asked
        local reason = 'job ' .. id .. ' is corrupt in storage: ' .. why .. ' (found when its ' .. outcome
          .. ' was recorded)'
        if message ~= '' then reason = reason .. ': ' .. message end
        append_error(key, attempts or 0, now, reason)
        state = finish(base, qi, key, id, 'dead', uk)
      elseif outcome == 'retry' then
        append_error(key, attempts, now, message)
        if attempts >= max_attempts then
          state = finish(base, qi, key, id, 'dead', uk)
        else
          state = requeue(base, key, id, priority, now, delay)
        end
      elseif outcome == 'fail' then
        append_error(key, attempts, now, message)
        state = finish(base, qi, key, id, 'dead', uk)
      else
        redis.call('HINCRBY', key, 'attempts', -1)
        state = requeue(base, key, id, priority, now, delay)
      end
    end
    if state == 'pending' then woke = true end
    out[j + 1] = state
  end
end
for q = 1, #KEYS do
  zrem_chunked(KEYS[q] .. 'leases', unleased[q])
  zadd_chunked(done_key(KEYS[q], 'completed'), done[q].completed)
  zadd_chunked(done_key(KEYS[q], 'dead'), done[q].dead)
end
if woke then
  redis.call('PUBLISH', ARGV[2], '1')
end
return out
