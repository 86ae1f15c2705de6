-- key_limits.lua: one queue's key limits (KeyStorage::set_key_limits,
-- clear_key_limits) and its keys report (KeyStorage::keys); claim.lua
-- reads the limits.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  "set", "clear" or "report"
-- ARGV[2]  set, clear: the key ("" for the queue's default, set only)
-- ARGV[3]  set: concurrency ("" for none)
-- ARGV[4]  set: rate limit ("" for none)
-- ARGV[5]  set: rate period (microseconds, "" for none)
-- ARGV[6]  set, clear: wake-up channel (PUBLISHed: jobs may have become
--          claimable)
-- `klimits` (schema.rs): field "" the default, a key's field its
-- override, each "concurrency\0rate_limit\0rate_period" ("" for none; an
-- override of no limits is "\0\0", which claim reads as unlimited). A
-- default of no limits is no field.
-- Returns 0 for set and clear; for report: { limits (flat field, value),
-- counts (flat key, running, pending: Pending and Scheduled) } of every
-- key with a Running, Pending or Scheduled job.

local base, op = KEYS[1], ARGV[1]
local limits = base .. 'klimits'
if op == 'set' then
  local value = ARGV[3] .. '\0' .. ARGV[4] .. '\0' .. ARGV[5]
  if ARGV[2] == '' and value == '\0\0' then
    redis.call('HDEL', limits, '')
  else
    redis.call('HSET', limits, ARGV[2], value)
  end
  redis.call('PUBLISH', ARGV[6], '1')
  return 0
end
if op == 'clear' then
  if redis.call('HDEL', limits, ARGV[2]) > 0 then
    redis.call('PUBLISH', ARGV[6], '1')
  end
  return 0
end

-- report: key -> { running, pending }, in first-met order
local counts, order = {}, {}
local function at(key)
  local c = counts[key]
  if not c then
    c = { 0, 0 }
    counts[key] = c
    order[#order + 1] = key
  end
  return c
end
local running = redis.call('HGETALL', base .. 'krun')
for i = 1, #running, 2 do
  -- field '' is no key (it keeps the hash a hashtable, claim.lua)
  if running[i] ~= '' then at(running[i])[1] = tonumber(running[i + 1]) or 0 end
end
-- each (priority, key) of `kwait` once: its first member, its count,
-- then a seek past its last member (a command or two per pair, not per job)
local kwait = base .. 'kwait'
local m = redis.call('ZRANGE', kwait, '0', '0')[1]
while m do
  local p = string.find(m, '\0', 12, true)
  local pfx = string.sub(m, 1, p)
  local c = at(string.sub(m, 12, p - 1))
  c[2] = c[2] + redis.call('ZLEXCOUNT', kwait, '[' .. pfx, '[' .. pfx .. '\255')
  m = redis.call('ZRANGEBYLEX', kwait, '(' .. pfx .. '\255', '+', 'LIMIT', '0', '1')[1]
end
local scheduled = redis.call('ZRANGE', base .. 'kscheduled', '0', '-1')
for i = 1, #scheduled, 1000 do
  local part = { unpack(scheduled, i, math.min(i + 999, #scheduled)) }
  local states = redis.call('HMGET', base .. 'states', unpack(part))
  for j = 1, #part do
    local key = states[j] and split(states[j], 10)[10]
    if key and key ~= '' then at(key)[2] = at(key)[2] + 1 end
  end
end
local flat = {}
for _, key in ipairs(order) do
  local c = counts[key]
  if c[1] > 0 or c[2] > 0 then
    flat[#flat + 1] = key
    flat[#flat + 1] = fmt(c[1])
    flat[#flat + 1] = fmt(c[2])
  end
end
return { redis.call('HGETALL', limits), flat }
