-- peek.lua: the claim-order keys of the first claimable jobs of one queue,
-- changing nothing. Used on Redis Cluster to split a claim over several
-- queues (several slots) into one claim per queue without losing the
-- global order: the client merges the peeks and claims from each queue as
-- many jobs as it contributes to the first `limit`.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  limit
-- ARGV[3]  due bound (as in claim.lua)
-- Returns { score, member } pairs: score -priority, member as in the ready
-- set (20-digit run_at, then the id).

local base = KEYS[1]
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local out = {}
local due = redis.call('ZRANGEBYSCORE', base .. 'v2:scheduled', '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
for i = 1, #due, 2 do
  local priority = int(read_body(base, due[i]).priority)
  if priority then
    out[#out + 1] = { -tonumber(priority), ready_member(tonumber(due[i + 1]), due[i]) }
  end
end
local top = redis.call('ZRANGE', base .. 'v2:ready', 0, limit - 1, 'WITHSCORES')
for i = 1, #top, 2 do
  out[#out + 1] = { tonumber(top[i + 1]), top[i] }
end
return out
