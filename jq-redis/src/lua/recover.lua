-- recover.lua: hands back up to `batch` jobs of one queue whose lease
-- expired: Pending (run_at now) with attempts left, else Dead, with a
-- "lease expired" error for the lost attempt.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  batch size (the caller calls again while a full batch was seen)
-- ARGV[3]  wake-up channel (PUBLISHed when a job became Pending)
-- Returns { jobs recovered, lease entries examined, reasons }: reasons
-- lists, for each job that went to Dead because its hash is corrupt, why
-- (the caller logs them).
--
-- The guard (state Running and lease_expires_at <= now) is checked in the
-- same script as the write, so a job a concurrent ack just finished is never
-- touched.
--
-- Every field this script computes with is checked before the first write
-- to its job (see int() in common.lua): a corrupt job goes to Dead with the
-- reason; it must not stop the others, nor stay in the lease index forever.

local base = KEYS[1]
local now = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', base .. 'leases', '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
local woke = false
local reasons = {}
for _, id in ipairs(expired) do
  local key = job_key(base, id)
  local f = redis.call('HMGET', key, 'state', 'lease_expires_at', 'attempts', 'max_attempts', 'priority', 'lease_worker')
  if f[1] ~= 'running' then
    -- a stale index entry: the job is no longer Running
    redis.call('ZREM', base .. 'leases', id)
  else
    local expires, attempts, max_attempts, priority = int(f[2]), int(f[3] or 0), int(f[4]), int(f[5])
    local why
    if not expires then
      why = unusable('lease_expires_at', f[2])
    elseif not attempts then
      why = unusable('attempts', f[3])
    elseif not max_attempts then
      why = unusable('max_attempts', f[4])
    elseif not priority then
      why = unusable('priority', f[5])
    end
    if why then
      -- The index says the lease expired; the hash cannot say otherwise.
      local reason = 'job ' .. id .. ' is corrupt in storage: ' .. why .. ' (found when its lease expired)'
      redis.call('ZREM', base .. 'leases', id)
      clear_lease(key)
      bury_corrupt(base, key, id, attempts, now, reason)
      reasons[#reasons + 1] = reason
      moved = moved + 1
    elseif expires <= now then
      redis.call('ZREM', base .. 'leases', id)
      clear_lease(key)
      append_error(key, attempts, now,
        'lease expired (worker ' .. (f[6] or '?') .. ' did not finish or heartbeat in time)')
      if attempts >= max_attempts then
        make_terminal(base, key, id, 'dead', now)
      else
        make_pending(base, key, id, priority, now)
        woke = true
      end
      moved = moved + 1
    else
      -- the index was behind the hash (cannot happen through jq); repair it
      redis.call('ZADD', base .. 'leases', fmt(expires), id)
    end
  end
end
if woke then
  redis.call('PUBLISH', ARGV[3], '1')
end
return { moved, #expired, reasons }
