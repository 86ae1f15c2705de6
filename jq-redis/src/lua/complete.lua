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
-- unknown, not Running, or holds another token (nothing changed then).

local now = tonumber(ARGV[1])
local out = {}
local woke = false
local n = (#ARGV - 2) / 6
for j = 0, n - 1 do
  local a = 2 + j * 6
  local base, id, token = KEYS[tonumber(ARGV[a + 1])], ARGV[a + 2], ARGV[a + 3]
  local outcome, message, delay = ARGV[a + 4], ARGV[a + 5], tonumber(ARGV[a + 6])
  local key = job_key(base, id)
  local f = redis.call('HMGET', key, 'state', 'lease_token', 'attempts', 'max_attempts', 'priority', 'unique_key')
  if f[1] ~= 'running' or f[2] ~= token then
    out[#out + 1] = 'lost'
  else
    local attempts, max_attempts, priority, uk = tonumber(f[3] or 0), tonumber(f[4]), f[5], f[6]
    redis.call('ZREM', base .. 'leases', id)
    clear_lease(key)
    local state
    if outcome == 'ack' then
      state = make_terminal(base, key, id, 'completed', now, uk)
    elseif outcome == 'retry' then
      append_error(key, attempts, now, message)
      if attempts >= max_attempts then
        state = make_terminal(base, key, id, 'dead', now, uk)
      else
        state = requeue(base, key, id, priority, now, delay)
      end
    elseif outcome == 'fail' then
      append_error(key, attempts, now, message)
      state = make_terminal(base, key, id, 'dead', now, uk)
    else
      redis.call('HINCRBY', key, 'attempts', -1)
      state = requeue(base, key, id, priority, now, delay)
    end
    if state == 'pending' then woke = true end
    out[#out + 1] = state
  end
end
if woke then
  redis.call('PUBLISH', ARGV[2], '1')
end
return out
