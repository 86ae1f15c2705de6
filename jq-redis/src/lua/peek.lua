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
-- Returns { score, member, effective run_at } triples: score -priority,
-- member as in the ready set (20-digit run_at, then the id), the
-- effective run_at "" for a plain job and for a keyed job the one its
-- rotation gives it (schema.rs, "Keyed jobs"; due keyed Scheduled jobs are
-- left to the claim and to promote), the first `limit` in claim order,
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
  limit = math.min(limit, math.max(0, tonumber(c[2]) - redis.call('ZCARD', base .. 'leases')))
end
if c[3] and c[4] then
  local started = redis.call('ZCOUNT', base .. 'starts', '(' .. fmt(now - tonumber(c[4])), '+inf')
  limit = math.min(limit, math.max(0, tonumber(c[3]) - started))
end
if limit <= 0 then
  return {}
end
local out = {}
local due = redis.call('ZRANGEBYSCORE', base .. 'scheduled', '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
for i = 1, #due, 2 do
  local priority = int(read_body(base, due[i]).priority)
  if priority then
    out[#out + 1] = { -tonumber(priority), ready_member(tonumber(due[i + 1]), due[i]) }
  end
end
local top = redis.call('ZRANGE', base .. 'ready', 0, limit - 1, 'WITHSCORES')
for i = 1, #top, 2 do
  out[#out + 1] = { tonumber(top[i + 1]), top[i] }
end
local keyed = redis.call('EXISTS', base .. 'kwait') == 1
if #out > limit or keyed then
  table.sort(out, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
end
if keyed then
  -- keyed jobs: the queue's own merge of its plain jobs and its rotation,
  -- as claim.lua takes them, each keyed one with its effective run_at
  local K = rotations()
  local candidates = {}
  for i, o in ipairs(out) do candidates[i] = { o[1], o[2], base, false, 1 } end
  local merged = {}
  K.merge(candidates, { K.open(base, limit, now, true) }, 1, limit, function() return true end,
    function(c) merged[#merged + 1] = { c[1], c[2], '' } end,
    function(_, _, member, _, run_at, score) merged[#merged + 1] = { score, member, run_at } end)
  return merged
end
-- the client merges by (score, member): keep this queue's first `limit`
for i = #out, limit + 1, -1 do
  out[i] = nil
end
for _, o in ipairs(out) do o[3] = '' end
return out
