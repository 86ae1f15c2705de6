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
-- keyed Scheduled jobs have their own set (schema.rs); make_pending puts
-- them in their key's
local keyed = {}
if #due < tonumber(ARGV[2]) then
  keyed = redis.call('ZRANGEBYSCORE', base .. 'kscheduled', '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]) - #due)
end
for _, id in ipairs(keyed) do
  redis.call('ZREM', base .. 'kscheduled', id)
  due[#due + 1] = id
end
for _, id in ipairs(due) do
  redis.call('ZREM', base .. 'scheduled', id)
  promote_due(base, id, now)
end
if #due > 0 then
  redis.call('PUBLISH', ARGV[3], '1')
end
return #due
