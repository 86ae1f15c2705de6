-- common/core.lua: the first part of the library prepended to every jq
-- script. enqueue.lua gets this part and store.lua only, enqueue_one.lua
-- and enqueue_many.lua this part alone: what storing new jobs needs and nothing more, since
-- every script call runs its whole library's definitions again (a closure
-- each), and an enqueue does little else. It holds the formatting of numbers, the field that keeps a
-- queue's hashes hashtables, commands in chunks and the lookup of a
-- unique key's holder. No KEYS/ARGV of its own.
--
-- scripts.rs puts the parts before each script in a fixed order, core.lua,
-- base.lua, workflows.lua, rotation.lua, moves.lua, store.lua (enqueue.lua:
-- core.lua, store.lua; enqueue_one.lua, enqueue_many.lua: core.lua): each part uses only what the parts before it
-- define (a Lua local is seen only below its definition).

local function fmt(n)
  return string.format('%d', n)
end
-- Numbers passed to redis.call go as strings made by fmt: Redis 7.0 turns a
-- Lua number argument into text with snprintf("%.17g"), which costs far
-- more per microsecond instant (scripts/redis-instructions.sh shows it).

-- The value of field '' of a queue's `jobs` and `states` hashes
-- (ids are 32 hex digits, so no job has that name). It is longer than
-- Redis's `hash-max-listpack-value` (64 bytes by default), so the hash is
-- a hashtable from its first job: Redis keeps a hash of up to 512 short
-- values as a listpack, searched from the front on every HMGET and HSET:
-- a queue of 400 jobs cost about a third more instructions per drained
-- job that way than with this field (`JQ_JOBS=400 scripts/redis-instructions.sh`).
-- A hash never goes back to a listpack.
local HASHTABLE = 'jq: this field keeps this hash a hashtable (O(1) lookups) however few jobs it holds'

-- `command key items...` in chunks of 1,000 items, so unpack stays small
-- (it fails near 8,000). The chunk size is even, so (score, member) pairs
-- of a ZADD never split. `from` and `to` (default: all of them) pick a
-- range of `items`, so a script can hand on a range of its ARGV.
local function call_chunked(command, key, items, from, to)
  local n = to or #items
  local i = from or 1
  while i <= n do
    local j = math.min(i + 999, n)
    redis.call(command, key, unpack(items, i, j))
    i = j + 1
  end
end

-- ZADD of many (score, member) pairs; HSET of many (field, value) pairs.
local function zadd_chunked(key, pairs_)
  call_chunked('ZADD', key, pairs_)
end
local function hset_chunked(key, pairs_)
  call_chunked('HSET', key, pairs_)
end

-- HMGET of many fields (at most 1,000 per call, as call_chunked).
local function hmget_chunked(key, fields)
  local n = #fields
  if n <= 1000 then return redis.call('HMGET', key, unpack(fields)) end
  local out = {}
  local i = 1
  while i <= n do
    local j = math.min(i + 999, n)
    local part = redis.call('HMGET', key, unpack(fields, i, j))
    for k = 1, #part do out[#out + 1] = part[k] end
    i = j + 1
  end
  return out
end

-- A queue's `unique` hash maps a unique key to the ids of the live jobs
-- holding it, ascending and joined by ",". Almost always one id: several
-- only after an operator's retry brought a Dead job back while a newer
-- live job held its key (the contract lets them share it). Enqueue answers
-- with the first, the smallest id, as the other backends do, and the key
-- stays taken until the last of them leaves the live states.

-- The id enqueue answers for unique key `uk` of the queue, or nil.
local function unique_holder(base, uk)
  local v = redis.call('HGET', base .. 'unique', uk)
  if not v then return nil end
  local comma = string.find(v, ',', 1, true)
  if comma then return string.sub(v, 1, comma - 1) end
  return v
end
