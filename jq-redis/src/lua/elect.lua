-- elect.lua: takes or renews a named role (RoleStorage::elect).
--
-- KEYS[1]  the role's hash (see Keys::role), fields token holder expires_at
-- ARGV[1]  now (microseconds)
-- ARGV[2]  the candidate's token
-- ARGV[3]  the candidate's name
-- ARGV[4]  expiry if taken (microseconds)
-- Returns 1 when the role is now the candidate's (it was free, expired at
-- now, or held with this token already), 0 when another token holds it.
-- A stored expiry that is not a number counts as expired.

local cur = redis.call('HMGET', KEYS[1], 'token', 'expires_at')
local held_until = tonumber(cur[2])
if cur[1] and cur[1] ~= ARGV[2] and held_until and held_until > tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'token', ARGV[2], 'holder', ARGV[3], 'expires_at', ARGV[4])
return 1
