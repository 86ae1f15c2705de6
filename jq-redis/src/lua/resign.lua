-- resign.lua: frees a named role when this token holds it.
--
-- KEYS[1]  the role's hash (see Keys::role)
-- ARGV[1]  the holder's token
-- Returns 1 when freed, 0 when another token (or nobody) held it.

if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
