-- promote.lua: makes up to `batch` due Scheduled jobs of one queue Pending.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  batch size (the caller calls again while a full batch moved)
-- ARGV[3]  wake-up channel (PUBLISHed when a job moved)
-- Returns how many jobs moved.

local base = KEYS[1]
local now = tonumber(ARGV[1])
local due = redis.call('ZRANGEBYSCORE', base .. 'scheduled', '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  local key = job_key(base, id)
  local f = redis.call('HMGET', key, 'priority', 'run_at')
  redis.call('ZREM', base .. 'scheduled', id)
  if f[1] and f[2] then
    make_pending(base, key, id, f[1], tonumber(f[2]))
  end
end
if #due > 0 then
  redis.call('PUBLISH', ARGV[3], '1')
end
return #due
