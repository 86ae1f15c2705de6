-- heartbeat.lua: extends the leases of a batch of Running jobs.
--
-- KEYS[q]  base of each queue the batch touches
-- ARGV[1]  now (microseconds)
-- ARGV[2]  lease duration (microseconds)
-- then 3 values per item: queue index (1-based into KEYS), id (32 hex), token
-- Returns { lost, cancel }: the ids whose lease was lost (job unknown, not
-- Running, or another token), and the ids extended that hold a cancel
-- request. An expired lease not yet recovered is still extended.

local expires = fmt(tonumber(ARGV[1]) + tonumber(ARGV[2]))
local lost, cancel = {}, {}
-- per queue index: whether it has any job with extra fields
local extra = {}
local n = (#ARGV - 2) / 3
for j = 0, n - 1 do
  local a = 2 + j * 3
  local qi = tonumber(ARGV[a + 1])
  local base, id, token = KEYS[qi], ARGV[a + 2], ARGV[a + 3]
  local st = read_state(base, id)
  if not st or st.state ~= 'running' or st.lease_token ~= token then
    lost[#lost + 1] = id
  else
    st.lease_expires_at = expires
    write_state(base, id, st)
    redis.call('ZADD', base .. 'leases', expires, id)
    if extra[qi] == nil then extra[qi] = redis.call('EXISTS', base .. 'extra') == 1 end
    if extra[qi] and read_extra(base, id).cancel_at ~= '' then
      cancel[#cancel + 1] = id
    end
  end
end
return { lost, cancel }
