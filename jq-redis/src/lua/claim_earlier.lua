-- claim_earlier.lua: the Running jobs a claim with this token took, for a
-- resent claim whose first answer was lost. Changes nothing. Walks the
-- leases set of the queue (Running jobs only), so it costs a read per job
-- running right now; it runs for resends only.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  the claim's token
-- Returns one flat field/value array (job_fields) per job found.

local base, token = KEYS[1], ARGV[1]
local out = {}
local ids = redis.call('ZRANGE', base .. 'leases', 0, -1)
if #ids == 0 then return out end
local states = hmget_chunked(base .. 'states', ids)
for i, id in ipairs(ids) do
  local v = states[i]
  if v then
    local state, lease_token = string.match(v, '^(%Z*)%z%Z*%z%Z*%z%Z*%z%Z*%z(%Z*)')
    if state == 'running' and lease_token == token then
      out[#out + 1] = job_fields(base, id)
    end
  end
end
return out
