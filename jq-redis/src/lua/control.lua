-- control.lua: sets one queue's control (ControlStorage::set_paused, set_limits);
-- claim.lua reads it.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  "pause", "resume" or "limits"
-- ARGV[2]  pause: now (microseconds); limits: concurrency ("" for none)
-- ARGV[3]  limits: rate limit ("" for none)
-- ARGV[4]  limits: rate period (microseconds)
-- ARGV[5]  wake-up channel (PUBLISHed on resume and on new limits: jobs
--          may have become claimable)
-- A pause keeps an earlier pause's instant. The hash disappears with its
-- last field, so a queue with nothing set costs claims one empty HMGET.

local key = KEYS[1] .. 'control'
local op = ARGV[1]
if op == 'pause' then
  redis.call('HSETNX', key, 'paused_at', ARGV[2])
  return 0
end
if op == 'resume' then
  redis.call('HDEL', key, 'paused_at')
else
  if ARGV[2] == '' then
    redis.call('HDEL', key, 'concurrency')
  else
    redis.call('HSET', key, 'concurrency', ARGV[2])
  end
  if ARGV[3] == '' then
    redis.call('HDEL', key, 'rate_limit', 'rate_period')
  else
    redis.call('HSET', key, 'rate_limit', ARGV[3], 'rate_period', ARGV[4])
  end
end
redis.call('PUBLISH', ARGV[5], '1')
return 0
