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
local st = read_state(base, id)
if not st then return 'notfound' end
if st.state ~= 'dead' then return st.state end
local b = read_body(base, id)
local attempts, max_attempts = int(st.attempts) or 0, int(b.max_attempts) or 0
redis.call('ZREM', done_key(base, 'dead'), id)
if max_attempts < attempts + 1 and b.kind then
  b.max_attempts = fmt(attempts + 1)
  write_body(base, id, b)
end
make_pending(base, id, st, int(b.priority) or 0, now)
-- an operator's new start: no cancel request carried over
local x = read_extra(base, id)
if x.cancel_at ~= '' then
  x.cancel_at, x.cancel_reason = '', ''
  write_extra(base, id, x)
end
-- the job is live again: it holds its unique key again, shared with any
-- newer live job that took it meanwhile
if st.unique_key ~= '' then
  unique_take(base, st.unique_key, id)
end
redis.call('PUBLISH', ARGV[3], '1')
return 'ok'
