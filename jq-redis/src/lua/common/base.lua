-- common/base.lua: the second part of the library prepended to every jq
-- script but enqueue.lua (no KEYS/ARGV of its own), after core.lua (see
-- there for the order of the parts). This one holds the checks of
-- numbers, the job layout and its packed values, a job's indexes (the
-- keyed ones too) and the moves to Pending and Scheduled.
--
-- A queue's keys all start with its base "<prefix>:{<prefix>:<queue>}:"
-- (see schema.rs); scripts get the bases as KEYS and derive every key of the
-- queue from them, so all keys one script touches share one hash slot.
-- Instants are integer microseconds; they stay below 2^53, so a Lua number
-- (a double) holds them exactly. Never format them with tostring (it uses
-- %.14g): use fmt().
--
-- The job layout (schema.rs): a job is one field, its id, in each of three
-- hashes of its queue, `jobs` (what never changes after enqueue: kind,
-- payload, priority, max_attempts, created_at, trace), `states` (state,
-- attempts, run_at, unique_key, lease_expires_at, lease_token, lease_worker,
-- finished_at) and `errors` (the JSON list, absent while empty); each
-- value's fields are joined by "\0" in that order, "" when absent. A batch
-- of jobs is then read or written with one HMGET or HSET per hash, where a
-- hash per job cost a command per job.

-- The integer `v` holds, or nil when it holds none (missing, not a number,
-- NaN, infinite, fractional, or beyond what a double holds exactly).
local function int(v)
  local n = tonumber(v)
  if n and n == math.floor(n) and n > -2 ^ 53 and n < 2 ^ 53 then return n end
  return nil
end

-- Why the field `name` with value `v` is unusable.
local function unusable(name, v)
  if v == nil or v == false or v == '' then return 'field ' .. name .. ' is missing' end
  return 'field ' .. name .. ' ' .. cjson.encode(v) .. ' is not an integer'
end

-- Records that `worker` met queue `base`'s control at `now` (`paused`:
-- the queue's paused_at, or nil), in the hash `seen` (worker -> "now:1" or
-- "now:0"). At most once an hour per queue (`seen_gc` holds the next
-- instant to look, and is looked at again when the clock went back) it
-- drops the entries of claimers last seen at or before `forgotten` (now -
-- SEEN_TTL, a day): the names of pools long gone must not pile up.
local function record_seen(base, worker, now, paused, forgotten)
  redis.call('HSET', base .. 'seen', worker, fmt(now) .. (paused and ':1' or ':0'))
  local gc = tonumber(redis.call('GET', base .. 'seen_gc'))
  if gc and gc > now and gc <= now + 3600000000 then return end
  local all = redis.call('HGETALL', base .. 'seen')
  local gone = {}
  for i = 1, #all, 2 do
    local at = tonumber(string.match(all[i + 1], '^(-?%d+):'))
    if not at or at <= forgotten then gone[#gone + 1] = all[i] end
  end
  for i = 1, #gone, 1000 do
    redis.call('HDEL', base .. 'seen', unpack(gone, i, math.min(i + 999, #gone)))
  end
  redis.call('SET', base .. 'seen_gc', fmt(now + 3600000000))
end

-- Member of the ready set: score -priority (so ZRANGE gives the highest
-- priority first), then this member orders lexicographically by run_at
-- (20 zero-padded digits) and id (32 lowercase hex digits).
local function ready_member(run_at, id)
  local r = tonumber(run_at)
  if r < 0 then r = 0 end
  return string.format('%020d', r) .. id
end

local function done_key(base, state)
  return base .. 'done:' .. state
end

-- The `n` fields of a packed value; fields it lacks are "", and the last
-- field takes whatever follows (so a value with too many fields shows up
-- as an unusable last field).
local function split(v, n)
  local t = {}
  local i = 1
  for k = 1, n - 1 do
    local j = string.find(v, '\0', i, true)
    if not j then
      t[k] = string.sub(v, i)
      for m = k + 1, n do t[m] = '' end
      return t
    end
    t[k] = string.sub(v, i, j - 1)
    i = j + 1
  end
  t[n] = string.sub(v, i)
  return t
end

-- A job's state value as a table, or nil when the job is not stored.
-- A workflow step's state value has a ninth field, `flow` (schema.rs): "w"
-- (a step) or "c" (a step with children), then its workflow's id (32 hex),
-- then the base of the queue holding the workflow's summary when that is
-- not the step's own. A plain job's value has 8 fields, as before
-- workflows: the scripts learn that a job is a step from the value they
-- read anyway, so a plain job costs nothing more.
local function read_state(base, id)
  local v = redis.call('HGET', base .. 'states', id)
  if not v then return nil end
  local f = split(v, 10)
  return { state = f[1], attempts = f[2], run_at = f[3], unique_key = f[4], lease_expires_at = f[5],
    lease_token = f[6], lease_worker = f[7], finished_at = f[8], flow = f[9], key = f[10] }
end

-- A keyed job's state value has a tenth field, its key (schema.rs), after
-- its flow ("" for a job that is no workflow step): a plain job's value
-- keeps its 8 (or 9) fields.
local function pack_state(s)
  local v = s.state .. '\0' .. s.attempts .. '\0' .. s.run_at .. '\0' .. s.unique_key .. '\0' .. s.lease_expires_at
    .. '\0' .. s.lease_token .. '\0' .. s.lease_worker .. '\0' .. s.finished_at
  if s.key and s.key ~= '' then
    v = v .. '\0' .. (s.flow or '') .. '\0' .. s.key
  elseif s.flow and s.flow ~= '' then
    v = v .. '\0' .. s.flow
  end
  return v
end

-- Keyed jobs (schema.rs, "Keyed jobs"). A keyed job is never in `ready`
-- or `scheduled`: Pending, it is in its queue's `kwait` (score 0,
-- member kwait_member: priority, key, NUL, ready member), so ZRANGEBYLEX
-- reads a queue's keyed jobs by priority from the highest, then key in byte
-- order, then run_at and id: the rotation is a walk of that one index from
-- the cursor, each key's first member its head, as `jobs_keyed` is on
-- PostgreSQL; Scheduled, in `kscheduled` (score run_at, member id).
-- `kpending` counts the Pending ones (stats), `krun` the Running ones
-- per key.

-- The prefix of priority `priority`'s members: 11 digits that order the
-- priorities from the highest.
local function kprio(priority)
  return string.format('%011d', 5000000000 - priority)
end

-- The `kwait` member of a keyed Pending job (key `key`, priority, ready
-- member). Keys hold no NUL, so a key's members sort right after those of
-- every key it is a prefix of, as the keys do.
local function kwait_member(priority, key, member)
  return kprio(priority) .. key .. '\0' .. member
end

-- Keyed job `id` (key `key`, priority, ready member) becomes Pending.
local function kready_add(base, key, priority, member)
  redis.call('ZADD', base .. 'kwait', '0', kwait_member(priority, key, member))
  redis.call('INCR', base .. 'kpending')
end

-- Removes a Pending keyed job (key `key`, ready member `member`) from
-- `kwait`: at `priority`, or when that is unknown (nil: a corrupt body)
-- at whichever priority holds it.
local function kready_remove(base, key, priority, member)
  local set = base .. 'kwait'
  local gone = 0
  if priority then
    gone = redis.call('ZREM', set, kwait_member(priority, key, member))
  else
    local m = redis.call('ZRANGE', set, '0', '0')[1]
    while m and gone == 0 do
      local enc = string.sub(m, 1, 11)
      gone = redis.call('ZREM', set, enc .. key .. '\0' .. member)
      -- keys are UTF-8, so no member holds the byte 255
      m = redis.call('ZRANGEBYLEX', set, '[' .. enc .. '\255', '+', 'LIMIT', '0', '1')[1]
    end
  end
  if gone > 0 then redis.call('DECRBY', base .. 'kpending', fmt(gone)) end
end

-- A keyed job leaves Running: its key's count goes down (a batch of them:
-- krun_leave_many, below).
local function krun_leave(base, key)
  if redis.call('HINCRBY', base .. 'krun', key, '-1') <= 0 then
    redis.call('HDEL', base .. 'krun', key)
  end
end

-- A job (state table `st`, its state still the one it leaves) moves to
-- another state: a keyed job leaving Running frees its key's slot. Every
-- move out of Running but claim's batch ack goes through here.
local function leave(base, st)
  if st.key and st.key ~= '' and st.state == 'running' then krun_leave(base, st.key) end
end

local function write_state(base, id, s)
  redis.call('HSET', base .. 'states', id, pack_state(s))
end

-- A job's fixed fields as a table ({} when the job is not stored).
local function read_body(base, id)
  local v = redis.call('HGET', base .. 'jobs', id)
  if not v then return {} end
  local f = split(v, 6)
  return { kind = f[1], payload = f[2], priority = f[3], max_attempts = f[4], created_at = f[5], trace = f[6] }
end

local function write_body(base, id, b)
  redis.call('HSET', base .. 'jobs', id,
    b.kind .. '\0' .. b.payload .. '\0' .. b.priority .. '\0' .. b.max_attempts .. '\0' .. b.created_at .. '\0' .. b.trace)
end

-- A job's extra fields (`extra`, absent for most jobs): its own
-- timeout (milliseconds), a cancel request (its instant and reason) and the
-- progress its handler last reported (JSON, last so that it may hold
-- anything but a NUL); '' when absent.
local function read_extra(base, id)
  local v = redis.call('HGET', base .. 'extra', id)
  if not v then return { timeout_ms = '', cancel_at = '', cancel_reason = '', progress = '' } end
  local f = split(v, 4)
  return { timeout_ms = f[1], cancel_at = f[2], cancel_reason = f[3], progress = f[4] }
end

local function write_extra(base, id, x)
  redis.call('HSET', base .. 'extra', id,
    x.timeout_ms .. '\0' .. x.cancel_at .. '\0' .. x.cancel_reason .. '\0' .. x.progress)
end

-- A job as a flat field/value list (what row.rs decodes), {} when absent:
-- id, the fields jq stores (the absent ones left out) and errors.
local function job_fields(base, id)
  local st = read_state(base, id)
  if not st then return {} end
  local out = { 'id', id }
  local function put(name, v)
    if v and v ~= '' then
      out[#out + 1] = name
      out[#out + 1] = v
    end
  end
  for _, name in ipairs({ 'state', 'attempts', 'run_at', 'unique_key', 'lease_expires_at', 'lease_token',
    'lease_worker', 'finished_at', 'key' }) do
    put(name, st[name])
  end
  local b = read_body(base, id)
  for _, name in ipairs({ 'kind', 'payload', 'priority', 'max_attempts', 'created_at', 'trace' }) do
    put(name, b[name])
  end
  put('errors', redis.call('HGET', base .. 'errors', id))
  local extra = redis.call('HGET', base .. 'extra', id)
  if extra then
    local x = split(extra, 4)
    put('timeout_ms', x[1])
    put('cancel_at', x[2])
    put('cancel_reason', x[3])
    put('progress', x[4])
  end
  return out
end

-- Removes a job from the index of the state it is in.
local function unindex(base, id, st)
  if st.state == 'pending' then
    if st.key and st.key ~= '' then
      kready_remove(base, st.key, int(read_body(base, id).priority), ready_member(int(st.run_at) or 0, id))
    else
      redis.call('ZREM', base .. 'ready', ready_member(int(st.run_at) or 0, id))
    end
  elseif st.state == 'scheduled' then
    redis.call('ZREM', base .. (st.key and st.key ~= '' and 'kscheduled' or 'scheduled'), id)
  elseif st.state == 'running' then
    redis.call('ZREM', base .. 'leases', id)
  elseif st.state == 'waiting' then
    redis.call('ZREM', base .. 'waiting', id)
  else
    redis.call('ZREM', done_key(base, st.state), id)
  end
end

-- Workflows (schema.rs): their helpers are built on first use by workflows()
-- (below), so a script that meets no workflow step pays for
-- one closure, not for theirs; `flow_lib.woke` is true once a release made
-- a job Pending (the script PUBLISHes on the wake-up channel then).
local workflows
local flow_lib

-- Lease fields mean something only while the job is Running.
local function clear_lease(st)
  st.lease_expires_at, st.lease_token, st.lease_worker = '', '', ''
end

local function make_pending(base, id, st, priority, run_at)
  if st.flow and st.flow ~= '' then workflows().count(base, st.flow, st.state, 'pending') end
  leave(base, st)
  st.state, st.run_at, st.finished_at = 'pending', fmt(run_at), ''
  clear_lease(st)
  write_state(base, id, st)
  if st.key and st.key ~= '' then
    kready_add(base, st.key, tonumber(priority), ready_member(run_at, id))
  else
    redis.call('ZADD', base .. 'ready', fmt(-tonumber(priority)), ready_member(run_at, id))
  end
end

local function make_scheduled(base, id, st, run_at)
  if st.flow and st.flow ~= '' then workflows().count(base, st.flow, st.state, 'scheduled') end
  leave(base, st)
  st.state, st.run_at, st.finished_at = 'scheduled', fmt(run_at), ''
  clear_lease(st)
  write_state(base, id, st)
  redis.call('ZADD', base .. (st.key and st.key ~= '' and 'kscheduled' or 'scheduled'), fmt(run_at), id)
end
