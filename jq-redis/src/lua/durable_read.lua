-- durable_read.lua: a job's journal (DurableStorage::journal).
--
-- KEYS[1]  base of the job's queue
-- ARGV[1]  id (32 hex)
-- Returns {"notfound"}, or one flat list: "ok", the wait ("" or index,
-- name, timeout joined by NUL), the number of entries n, then the n packed
-- entries, then one item per signal not taken yet (sent_at and name joined
-- by NUL; the payload left out); the layouts are durable.lua's.

local base, id = KEYS[1], ARGV[1]
if not redis.call('HGET', base .. 'states', id) then return { 'notfound' } end
local entries = redis.call('LRANGE', base .. 'journal:' .. id, 0, -1)
local out = { 'ok', redis.call('HGET', base .. 'waits', id) or '', tostring(#entries) }
for _, e in ipairs(entries) do out[#out + 1] = e end
for _, s in ipairs(redis.call('LRANGE', base .. 'signals:' .. id, 0, -1)) do
  local f = split(s, 3)
  out[#out + 1] = f[1] .. '\0' .. f[2]
end
return out
