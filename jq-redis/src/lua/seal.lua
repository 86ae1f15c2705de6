-- seal.lua: the first half of moving a periodic job to another queue
-- (periodic.rs): a compare-and-set that marks the periodic job's live hash as
-- moved, so no step fires it again, and returns what the new queue's hash
-- takes over (fire.lua, "adopt").
--
-- KEYS[1]  the periodic job's live hash (Keys::periodic_job), in its queue's slot
-- ARGV[1]  the expected cursor (microseconds)
-- ARGV[2]  the expected trigger (microseconds), "" for none
-- ARGV[3]  the queue it moves to
-- Returns {} when the hash is not the one expected (missing, moved
-- already, another cursor or trigger; nothing written), else { gen,
-- spec, zone, cursor, missed, last_missed, last_job, triggered_at,
-- declared_at }, "" for an absent field.

local h = redis.call('HMGET', KEYS[1], 'cursor', 'triggered_at', 'moved_to', 'gen', 'spec', 'zone', 'missed',
  'last_missed', 'last_job', 'declared_at')
if not h[1] or h[3] or h[1] ~= ARGV[1] or (h[2] or '') ~= ARGV[2] then return {} end
redis.call('HSET', KEYS[1], 'moved_to', ARGV[3])
return { h[4] or '0', h[5] or '', h[6] or '', h[1], h[7] or '0', h[8] or '', h[9] or '', h[2] or '', h[10] or '' }
