-- cancel.lua: Waiting, Scheduled or Pending -> Cancelled; a workflow
-- step's dependents follow in the same script (`finished` of workflows() in
-- common/workflows.lua).
--
-- KEYS[1]  base of the job's queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  id (32 hex)
-- ARGV[3]  wake-up channel (PUBLISHed when a dependent became Pending)
-- Returns "ok", "notfound", or the job's state when it cannot be cancelled.

local base, now, id = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local st = read_state(base, id)
if not st then return 'notfound' end
if st.state ~= 'scheduled' and st.state ~= 'pending' and st.state ~= 'waiting' then return st.state end
unindex(base, id, st)
make_terminal(base, id, st, 'cancelled', now)
if flow_lib and flow_lib.woke then
  redis.call('PUBLISH', ARGV[3], '1')
end
return 'ok'
