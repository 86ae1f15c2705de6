-- recover.lua: hands back up to `batch` jobs of one queue whose lease
-- expired: Pending (run_at now) with attempts left, else Dead, with a
-- "lease expired" error for the lost attempt.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  batch size (the caller calls again while a full batch was seen)
-- ARGV[3]  wake-up channel (PUBLISHed when a job became Pending)
-- Returns { jobs recovered, lease entries examined }.
--
-- The guard (state Running and lease_expires_at <= now) is checked in the
-- same script as the write, so a job a concurrent ack just finished is never
-- touched.

local base = KEYS[1]
local now = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', base .. 'leases', '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
local woke = false
for _, id in ipairs(expired) do
  local key = job_key(base, id)
  local f = redis.call('HMGET', key, 'state', 'lease_expires_at', 'attempts', 'max_attempts', 'priority', 'lease_worker')
  if f[1] ~= 'running' then
    -- a stale index entry: the job is no longer Running
    redis.call('ZREM', base .. 'leases', id)
  elseif tonumber(f[2]) <= now then
    local attempts, max_attempts = tonumber(f[3] or 0), tonumber(f[4])
    redis.call('ZREM', base .. 'leases', id)
    clear_lease(key)
    append_error(key, attempts, now,
      'lease expired (worker ' .. (f[6] or '?') .. ' did not finish or heartbeat in time)')
    if attempts >= max_attempts then
      make_terminal(base, key, id, 'dead', now)
    else
      make_pending(base, key, id, f[5], now)
      woke = true
    end
    moved = moved + 1
  else
    -- the index was behind the hash (cannot happen through jq); repair it
    redis.call('ZADD', base .. 'leases', tonumber(f[2]), id)
  end
end
if woke then
  redis.call('PUBLISH', ARGV[3], '1')
end
return { moved, #expired }
