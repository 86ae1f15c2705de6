-- fire.lua: one step of a recurring periodic job (PeriodicStorage::fire): a
-- compare-and-set on the periodic job's cursor and trigger, and the tick's
-- jobs stored in the same script, or nothing at all.
--
-- KEYS[1]  the periodic job's hash (Keys::periodic_job), in its queue's slot
-- KEYS[2]  the base of the periodic job's queue ("<prefix>:{<prefix>:<queue>}:")
-- ARGV[1]  now (microseconds): declared_at (the jobs' created_at is in their values)
-- ARGV[2]  wake-up channel
-- ARGV[3]  the queue name
-- ARGV[4]  the periodic job's name, ARGV[5] its spec, ARGV[6] its zone
-- ARGV[7]  the expected cursor (microseconds), "" when the periodic job must not exist yet
-- ARGV[8]  the expected trigger (microseconds), "" for none
-- ARGV[9]  the new cursor (microseconds)
-- ARGV[10] missed ticks to add, ARGV[11] the most recent of them ("" for none)
-- ARGV[12] "" for a plain step; "adopt" or "adopt-only" when the periodic job
--          moves here from another queue, whose hash seal.lua marked
--          moved: ARGV[13..21] are what seal.lua returned (gen, spec, zone,
--          cursor, missed, last_missed, last_job, triggered_at,
--          declared_at). This hash takes them over, with gen + 1, unless it
--          holds a newer generation already (a move that came back here
--          later); "adopt-only" then returns {2} and fires nothing.
-- then PER_JOB values per job (store.lua), as enqueue.lua takes them (queue
-- index always 1).
-- Returns {0} when the stored hash is not the one expected (nothing
-- written, or only the adoption), else {1, one value per job as
-- enqueue.lua returns them}.
--
-- A periodic job has one live hash, found from the registry (name -> queue):
-- a hash with `moved_to` set is no longer fired, so the cursor is one per
-- name whatever the queue, and pools declaring it in two queues during a
-- rolling deploy move it back and forth, each step a compare-and-set.

local mode = ARGV[12]
if mode ~= '' then
  local gen = tonumber(redis.call('HGET', KEYS[1], 'gen') or '0') or 0
  local source = tonumber(ARGV[13]) or 0
  if redis.call('EXISTS', KEYS[1]) == 0 or gen < source + 1 then
    redis.call('DEL', KEYS[1])
    redis.call('HSET', KEYS[1], 'name', ARGV[4], 'queue', ARGV[3], 'spec', ARGV[14], 'zone', ARGV[15],
      'cursor', ARGV[16], 'missed', ARGV[17], 'declared_at', ARGV[21], 'gen', fmt(source + 1))
    if ARGV[18] ~= '' then redis.call('HSET', KEYS[1], 'last_missed', ARGV[18]) end
    if ARGV[19] ~= '' then redis.call('HSET', KEYS[1], 'last_job', ARGV[19]) end
    if ARGV[20] ~= '' then redis.call('HSET', KEYS[1], 'triggered_at', ARGV[20]) end
  end
  if mode == 'adopt-only' then return {2} end
end

local cur = redis.call('HMGET', KEYS[1], 'cursor', 'triggered_at', 'moved_to')
if cur[3] then return {0} end
if ARGV[7] == '' then
  if cur[1] then return {0} end
else
  if cur[1] ~= ARGV[7] or (cur[2] or '') ~= ARGV[8] then return {0} end
end
local result = store_jobs({KEYS[2]}, ARGV[2], ARGV, 21)
local last = false
local n = #result
if n > 0 then
  last = result[n]
  if last == '' then last = ARGV[21 + (n - 1) * PER_JOB + 1] end
end
redis.call('HSET', KEYS[1], 'name', ARGV[4], 'queue', ARGV[3], 'spec', ARGV[5], 'zone', ARGV[6],
  'cursor', ARGV[9], 'declared_at', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'missed', ARGV[10])
if ARGV[11] ~= '' then redis.call('HSET', KEYS[1], 'last_missed', ARGV[11]) end
if last then redis.call('HSET', KEYS[1], 'last_job', last) end
redis.call('HDEL', KEYS[1], 'triggered_at')
local reply = {1}
for i = 1, n do reply[i + 1] = result[i] end
return reply
