-- migrate.lua: carries a batch of one queue's jobs over from the layout
-- before v2 (see migrate_legacy in common.lua).
--
-- KEYS[1]  base of the queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  batch size (the caller calls again while a full batch moved)
-- Returns how many jobs it looked at.

return migrate_legacy(KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[1]))
