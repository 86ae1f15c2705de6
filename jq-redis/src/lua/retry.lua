-- retry.lua: an operator's retry of a Dead job: Dead -> Pending.
--
-- KEYS[1]  base of the job's queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  id (32 hex)
-- ARGV[3]  wake-up channel
-- Returns "ok", "notfound", or the job's state when it is not Dead.
-- run_at becomes now, finished_at and the lease are cleared, errors are kept
-- and max_attempts becomes at least attempts + 1.

local base, now, id = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local key = job_key(base, id)
local f = redis.call('HMGET', key, 'state', 'attempts', 'max_attempts', 'priority', 'unique_key')
if not f[1] then return 'notfound' end
if f[1] ~= 'dead' then return f[1] end
local attempts, max_attempts = tonumber(f[2] or 0), tonumber(f[3])
redis.call('ZREM', done_key(base, 'dead'), id)
redis.call('HDEL', key, 'finished_at')
clear_lease(key)
if max_attempts < attempts + 1 then
  redis.call('HSET', key, 'max_attempts', fmt(attempts + 1))
end
make_pending(base, key, id, f[4], now)
-- the job is live again: it holds its unique key again, shared with any
-- newer live job that took it meanwhile
local uk = f[5]
if uk and uk ~= '' then
  unique_take(base, uk, id)
end
redis.call('PUBLISH', ARGV[3], '1')
return 'ok'
