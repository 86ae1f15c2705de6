-- claim_earlier.lua: the Running jobs a claim with this token took, for a
-- resent claim whose first answer was lost. Changes nothing. Walks the
-- leases set of each queue (Running jobs only), so it costs a call per job
-- running right now; it runs for resends only.
--
-- KEYS[q]  base of each asked queue
-- ARGV[1]  the claim's token
-- Returns one flat field/value array (HGETALL) per job found.

local token = ARGV[1]
local out = {}
for q = 1, #KEYS do
  local base = KEYS[q]
  for _, id in ipairs(redis.call('ZRANGE', base .. 'leases', 0, -1)) do
    local key = job_key(base, id)
    local f = redis.call('HMGET', key, 'state', 'lease_token')
    if f[1] == 'running' and f[2] == token then
      out[#out + 1] = redis.call('HGETALL', key)
    end
  end
end
return out
