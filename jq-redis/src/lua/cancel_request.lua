-- cancel_request.lua: cancels a job whatever its state
-- (CancelStorage::request_cancel).
--
-- KEYS[1]  base of the job's queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  id (32 hex)
-- ARGV[3]  reason (NULs already replaced)
-- ARGV[4]  wake-up channel (PUBLISHed when a workflow dependent became
--          Pending: the cancel releases a step's children as cancel.lua)
-- Returns "notfound"; "now_cancelled" when it was Waiting, Scheduled or
-- Pending (now Cancelled, as cancel.lua); "requested" when it is Running (the request stored in
-- extra unless one is: a resend keeps the first); else its state.

local base, now, id = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local st = read_state(base, id)
if not st then return 'notfound' end
if st.state == 'scheduled' or st.state == 'pending' or st.state == 'waiting' then
  unindex(base, id, st)
  make_terminal(base, id, st, 'cancelled', now)
  if flow_lib and flow_lib.woke then
    redis.call('PUBLISH', ARGV[4], '1')
  end
  return 'now_cancelled'
end
if st.state ~= 'running' then return st.state end
local x = read_extra(base, id)
if x.cancel_at == '' then
  x.cancel_at, x.cancel_reason = fmt(now), ARGV[3]
  write_extra(base, id, x)
end
return 'requested'
