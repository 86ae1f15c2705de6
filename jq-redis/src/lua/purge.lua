-- purge.lua: deletes up to `batch` jobs of one queue in a terminal state
-- that finished before a given instant.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  state ("completed" | "dead" | "cancelled")
-- ARGV[2]  older_than (microseconds, exclusive)
-- ARGV[3]  batch size (the caller calls again while a full batch was deleted)
-- Returns how many jobs were deleted.

local base = KEYS[1]
local done = done_key(base, ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', done, '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
if #ids > 0 then
  for _, key in ipairs({ 'v2:jobs', 'v2:states', 'v2:errors', 'v2:extra' }) do
    call_chunked('HDEL', base .. key, ids)
  end
  zrem_chunked(done, ids)
  zrem_chunked(base .. 'v2:ids', ids)
end
return #ids
