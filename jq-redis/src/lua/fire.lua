-- fire.lua: one step of a recurring periodic job (Storage::fire): a
-- compare-and-set on the periodic job's cursor and trigger, and the tick's
-- jobs stored in the same script, or nothing at all.
--
-- KEYS[1]  the periodic job's hash (Keys::periodic job), in its queue's slot
-- KEYS[2]  the base of the periodic job's queue ("<prefix>:{<prefix>:<queue>}:")
-- ARGV[1]  now (microseconds): created_at of the jobs, declared_at
-- ARGV[2]  wake-up channel
-- ARGV[3]  the queue name
-- ARGV[4]  the periodic job's name, ARGV[5] its spec, ARGV[6] its zone
-- ARGV[7]  the expected cursor (microseconds), "" when the periodic job must not exist yet
-- ARGV[8]  the expected trigger (microseconds), "" for none
-- ARGV[9]  the new cursor (microseconds)
-- ARGV[10] missed ticks to add, ARGV[11] the most recent of them ("" for none)
-- then 10 values per job, as enqueue.lua takes them (queue index always 1).
-- Returns {0} when the stored hash is not the one expected (nothing
-- written), else {1, one value per job as enqueue.lua returns them}.

local cur = redis.call('HMGET', KEYS[1], 'cursor', 'run_requested')
if ARGV[7] == '' then
  if cur[1] then return {0} end
else
  if cur[1] ~= ARGV[7] or (cur[2] or '') ~= ARGV[8] then return {0} end
end
local result = store_jobs({KEYS[2]}, ARGV[1], ARGV[2], ARGV, 11)
local last = false
local n = #result
if n > 0 then
  last = result[n]
  if last == '' then last = ARGV[11 + (n - 1) * 10 + 1] end
end
redis.call('HSET', KEYS[1], 'name', ARGV[4], 'queue', ARGV[3], 'spec', ARGV[5], 'zone', ARGV[6],
  'cursor', ARGV[9], 'declared_at', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'missed', ARGV[10])
if ARGV[11] ~= '' then redis.call('HSET', KEYS[1], 'last_missed', ARGV[11]) end
if last then redis.call('HSET', KEYS[1], 'last_job', last) end
redis.call('HDEL', KEYS[1], 'run_requested')
local reply = {1}
for i = 1, n do reply[i + 1] = result[i] end
return reply
