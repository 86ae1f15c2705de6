-- cancel.lua: Scheduled or Pending -> Cancelled.
--
-- KEYS[1]  base of the job's queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  id (32 hex)
-- Returns "ok", "notfound", or the job's state when it cannot be cancelled.

local base, now, id = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local key = job_key(base, id)
local f = redis.call('HMGET', key, 'state', 'run_at')
if not f[1] then return 'notfound' end
if f[1] ~= 'scheduled' and f[1] ~= 'pending' then return f[1] end
unindex(base, id, f[1], f[2])
make_terminal(base, key, id, 'cancelled', now)
return 'ok'
