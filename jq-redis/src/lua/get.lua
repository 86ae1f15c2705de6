-- get.lua: one job of one queue, changing nothing.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  id (32 hex)
-- Returns its flat field/value array (job_fields), empty when the queue
-- does not hold it.

return job_fields(KEYS[1], ARGV[1])
