-- cancel.lua: Scheduled or Pending -> Cancelled.
--
-- KEYS[1]  base of the job's queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  id (32 hex)
-- Returns "ok", "notfound", or the job's state when it cannot be cancelled.

local base, now, id = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local st = read_state(base, id)
if not st then return 'notfound' end
if st.state ~= 'scheduled' and st.state ~= 'pending' then return st.state end
unindex(base, id, st)
make_terminal(base, id, st, 'cancelled', now)
return 'ok'
