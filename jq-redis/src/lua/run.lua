-- run.lua: an operator's run request for a schedule (Storage::request_run).
--
-- KEYS[1]  the schedule's hash (Keys::schedule)
-- ARGV[1]  now (microseconds)
-- Returns 1 when the schedule exists (its request set to now unless one is
-- pending: requests coalesce), 0 when it does not.

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSETNX', KEYS[1], 'run_requested', ARGV[1])
return 1
