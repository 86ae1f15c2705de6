-- durable.lua: durable jobs (DurableStorage): checkpoint, suspend (a sleep
-- or a wait) and signal, each one atomic step on one job's queue.
--
-- KEYS[1]  base of the job's queue
-- ARGV[1]  op: "checkpoint" | "sleep" | "wait" | "signal"
-- ARGV[2]  now (microseconds)
-- ARGV[3]  id (32 hex)
-- ARGV[4]  lease token ("" for a signal)
-- ARGV[5], ARGV[6], ARGV[7]  the limits, jq-core's constants: a value's
--          bytes, a journal's entries, a journal's bytes
-- checkpoint, sleep, wait:
--   ARGV[8]  index (from 0), ARGV[9] name (checked), ARGV[10] kind
--   ("step" | "patch" for checkpoint), ARGV[11] value ("" for none: JSON is
--   never empty), ARGV[12] until (microseconds; a sleep's instant, a wait's
--   timeout; "" for a checkpoint)
-- signal: ARGV[8] name (checked), ARGV[9] payload (checked), ARGV[10] the
--   wake-up channel, ARGV[11] the most signals not taken yet (MAX_SIGNALS)
--
-- Keys of one job, all in its queue's slot (schema.rs): `journal:<id>` (a
-- list, one entry per index: kind, name, until, at, value joined by NUL,
-- the value last), `signals:<id>` (a list, oldest first: sent_at, name,
-- payload), the hashes `jbytes` (id -> the journal's bytes), `waits` (id ->
-- index, name, timeout) and `durable` (id -> 1 for every job with such
-- keys, so purge looks them up once per batch).
--
-- Replies: {"ok"}, {"lost"}, {"notfound"}, {"state", <state>},
-- {"mismatch", <index>, <recorded kind or "">, <recorded name>},
-- {"limit", "value" | "steps" | "bytes" | "signals", <size>, <max>}, {"due"},
-- {"waiting"}, {"signal", <payload>}, {"timedout"}.

local base, op, now, id, token = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local max_value, max_steps, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local jkey, skey = base .. 'journal:' .. id, base .. 'signals:' .. id

local function entry_at(index)
  local v = redis.call('LINDEX', jkey, index)
  if not v then return nil end
  local f = split(v, 5)
  return { kind = f[1], name = f[2], till = f[3], at = f[4], value = f[5] }
end

local function mark()
  redis.call('HSET', base .. 'durable', id, '1')
end

-- Appends (kind, name, value, till) at `index` under the contract's places
-- and limits: nil when appended, "same" when that entry is there (a
-- resend), else the reply that refuses it.
local function append(index, kind, name, value, till)
  local len = redis.call('LLEN', jkey)
  local at = entry_at(index)
  if at then
    if at.kind == kind and at.name == name then return 'same' end
    return { 'mismatch', tostring(index), at.kind, at.name }
  end
  if index ~= len then return { 'mismatch', tostring(index), '', '' } end
  if #value > max_value then return { 'limit', 'value', tostring(#value), tostring(max_value) } end
  if len + 1 > max_steps then return { 'limit', 'steps', tostring(len + 1), tostring(max_steps) } end
  local bytes = tonumber(redis.call('HGET', base .. 'jbytes', id) or '0') + #name + #value
  if bytes > max_bytes then return { 'limit', 'bytes', tostring(bytes), tostring(max_bytes) } end
  redis.call('RPUSH', jkey, kind .. '\0' .. name .. '\0' .. till .. '\0' .. ARGV[2] .. '\0' .. value)
  redis.call('HSET', base .. 'jbytes', id, fmt(bytes))
  mark()
  return nil
end

-- Running -> Scheduled until `till`, attempt given back, lease cleared: a
-- release with a delay (settle.lua's), keyed jobs and workflow steps alike.
local function park(st, till)
  local attempts = int(st.attempts) or 1
  redis.call('ZREM', base .. 'leases', id)
  st.attempts = fmt(attempts - 1)
  make_scheduled(base, id, st, till)
  if flow_lib then flow_lib.flush(now) end
end

if op == 'signal' then
  local st = read_state(base, id)
  if not st then return { 'notfound' } end
  if st.state == 'completed' or st.state == 'dead' or st.state == 'cancelled' then return { 'state', st.state } end
  local name = ARGV[8]
  local waiting = redis.call('LLEN', skey)
  if waiting + 1 > tonumber(ARGV[11]) then
    return { 'limit', 'signals', tostring(waiting + 1), ARGV[11] }
  end
  redis.call('RPUSH', skey, ARGV[2] .. '\0' .. name .. '\0' .. ARGV[9])
  mark()
  local w = redis.call('HGET', base .. 'waits', id)
  if st.state == 'scheduled' and w and split(w, 3)[2] == name then
    local priority = int(read_body(base, id).priority) or 0
    unindex(base, id, st)
    make_pending(base, id, st, priority, now)
    if flow_lib then flow_lib.flush(now) end
    redis.call('PUBLISH', ARGV[10], '1')
  end
  return { 'ok' }
end

local st = read_state(base, id)
if not st or st.state ~= 'running' or st.lease_token ~= token then return { 'lost' } end
local index, name, kind, value, till = tonumber(ARGV[8]), ARGV[9], ARGV[10], ARGV[11], ARGV[12]

if op == 'checkpoint' then
  local refused = append(index, kind, name, value, '')
  if refused and refused ~= 'same' then return refused end
  return { 'ok' }
end

if op == 'sleep' then
  local refused = append(index, 'sleep', 'sleep', '', till)
  if refused and refused ~= 'same' then return refused end
  -- the recorded instant wins over a replay's ask
  local wake = tonumber(entry_at(index).till) or tonumber(till)
  if wake <= now then return { 'due' } end
  park(st, wake)
  return { 'waiting' }
end

-- a wait
local at = entry_at(index)
if at then
  if (at.kind == 'signal' or at.kind == 'timeout') and at.name == name then
    if at.kind == 'signal' then return { 'signal', at.value } end
    return { 'timedout' }
  end
  return { 'mismatch', tostring(index), at.kind, at.name }
end
local signals = redis.call('LRANGE', skey, 0, -1)
for _, s in ipairs(signals) do
  local f = split(s, 3)
  if f[2] == name then
    -- recorded first: a limit refuses the take and the signal stays
    local refused = append(index, 'signal', name, f[3], '')
    if refused then return refused end
    redis.call('LREM', skey, 1, s)
    redis.call('HDEL', base .. 'waits', id)
    return { 'signal', f[3] }
  end
end
local deadline = tonumber(till)
local w = redis.call('HGET', base .. 'waits', id)
if w then
  local f = split(w, 3)
  if tonumber(f[1]) == index and f[2] == name then deadline = tonumber(f[3]) end
end
if deadline <= now then
  local refused = append(index, 'timeout', name, '', '')
  if refused then return refused end
  redis.call('HDEL', base .. 'waits', id)
  return { 'timedout' }
end
if index ~= redis.call('LLEN', jkey) then return { 'mismatch', tostring(index), '', '' } end
redis.call('HSET', base .. 'waits', id, fmt(index) .. '\0' .. name .. '\0' .. fmt(deadline))
mark()
park(st, deadline)
return { 'waiting' }
