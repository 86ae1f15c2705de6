-- run.lua: an operator's trigger for a periodic job (PeriodicStorage::trigger).
--
-- KEYS[1]  the periodic job's hash (Keys::periodic job)
-- ARGV[1]  now (microseconds)
-- Returns 1 when the periodic job exists (its request set to now unless one is
-- pending: requests coalesce), 0 when it does not.

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSETNX', KEYS[1], 'run_requested', ARGV[1])
return 1
