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
-- ARGV[4]  the claimer's name, ARGV[5] the instant at or before which
--          claimers are forgotten: a queue with a control records that the
--          claimer met it, as claim.lua does (the claim may take nothing
--          from it and not call claim.lua there)
-- Returns { score, member } pairs: score -priority, member as in the ready
-- set (20-digit run_at, then the id), the first `limit` in claim order,
-- and no more than the queue's control lets a claim take now (none while
-- paused, concurrency minus its leases, rate limit minus its starts in the
-- window; as claim.lua counts them, changing no job): a paused or limited
-- queue whose jobs are older must not take the claim's budget from the
-- others.

local base = KEYS[1]
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local c = redis.call('HMGET', base .. 'control', 'paused_at', 'concurrency', 'rate_limit', 'rate_period')
if c[1] or c[2] or c[3] then
  record_seen(base, ARGV[4], now, c[1], tonumber(ARGV[5]))
end
if c[1] then
  return {}
end
if c[2] then
  limit = math.min(limit, math.max(0, tonumber(c[2]) - redis.call('ZCARD', base .. 'v2:leases')))
end
if c[3] and c[4] then
  local started = redis.call('ZCOUNT', base .. 'starts', '(' .. fmt(now - tonumber(c[4])), '+inf')
  limit = math.min(limit, math.max(0, tonumber(c[3]) - started))
end
if limit <= 0 then
  return {}
end
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
if #out > limit then
  -- the client merges by (score, member): keep this queue's first `limit`
  table.sort(out, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  for i = #out, limit + 1, -1 do
    out[i] = nil
  end
end
return out
