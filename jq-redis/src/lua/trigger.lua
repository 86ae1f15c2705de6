-- trigger.lua: an operator's trigger for a periodic job (PeriodicStorage::trigger).
--
-- KEYS[1]  the periodic job's live hash (Keys::periodic_job)
-- ARGV[1]  now (microseconds)
-- Returns 1 when the periodic job's hash exists and is live (its trigger set
-- to now unless one is pending: triggers coalesce), 0 when it does not
-- exist, 2 when it moved to another queue (the caller looks again).

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[1], 'moved_to') == 1 then return 2 end
redis.call('HSETNX', KEYS[1], 'triggered_at', ARGV[1])
return 1
