-- common.lua: helpers prepended to every jq script (no KEYS/ARGV of its own).
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

local function fmt(n)
  return string.format('%d', n)
end
-- Numbers passed to redis.call go as strings made by fmt: Redis 7.0 turns a
-- Lua number argument into text with snprintf("%.17g"), about 4,000
-- instructions for a microsecond instant (scripts/redis-instructions.sh).

-- Redis does not roll a script back when it fails halfway, so a script
-- checks every stored field it computes with before its first write to
-- that job; a job whose fields it cannot use (hand-edited, foreign writer)
-- goes to Dead with the reason instead of stopping the script.

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

-- The value of field '' of a queue's `jobs` and `states` hashes
-- (ids are 32 hex digits, so no job has that name). It is longer than
-- Redis's `hash-max-listpack-value` (64 bytes by default), so the hash is
-- a hashtable from its first job: Redis keeps a hash of up to 512 short
-- values as a listpack, searched from the front on every HMGET and HSET:
-- a queue of 400 jobs cost 113,843 instructions per drained job that way
-- and 87,281 with this field (`JQ_JOBS=400 scripts/redis-instructions.sh`).
-- A hash never goes back to a listpack.
local HASHTABLE = 'jq: this field keeps this hash a hashtable (O(1) lookups) however few jobs it holds'

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

-- The workflow helpers (see `workflows` above), built on first use.
workflows = function()
  if flow_lib then return flow_lib end
  local F = { woke = false }
  -- Workflows (schema.rs). A step's summary (its workflow's counts per
  -- state) is the hash `<wfbase>wf:<workflow id>`; every script that
  -- moves a step from one state to another moves its count there too, so
  -- `workflow()` reads counts without reading the steps.
  function F.key(base, flow)
    local wfbase = string.sub(flow, 34)
    if wfbase == '' then wfbase = base end
    return wfbase .. 'wf:' .. string.sub(flow, 2, 33)
  end

  -- Waiting child `cid` of the queue at `cb` (state `st`) has no
  -- unfinished parent left: Pending at `now`, or Scheduled when its
  -- run_at is later. Sets F.woke when it became Pending.
  function F.ready(cb, cid, st, now)
    redis.call('ZREM', cb .. 'waiting', cid)
    local run_at = int(st.run_at) or now
    if run_at <= now then
      make_pending(cb, cid, st, int(read_body(cb, cid).priority) or 0, now)
      F.woke = true
    else
      make_scheduled(cb, cid, st, run_at)
    end
  end

  -- A step with flow `flow` ("" for a plain job: nothing to do) of the queue
  -- at `base` moves from state `from` to state `to`.
  function F.count(base, flow, from, to)
    if not flow or flow == '' or from == to then return end
    local key = F.key(base, flow)
    redis.call('HINCRBY', key, from, '-1')
    redis.call('HINCRBY', key, to, '1')
  end

  -- The batch scripts' way (claim.lua, settle.lua): F.later counts as
  -- F.count does, and F.completed_later releases a "c" step's children as
  -- F.finished(base, id, 'completed', now) does, but both are kept in this
  -- table and written by F.flush, which the script calls once at its end.
  -- A fan-in of 10,000 members then costs each claim and ack batch two
  -- HINCRBY and a few HMGET/HSET, where each member cost two HINCRBY per
  -- move and six commands per release (BENCHMARKS.md, session 20). Counts
  -- are sums, so deferring them changes no result; deferring releases is
  -- checked in F.release_completed.
  --
  -- A flow names its summary by itself, but for the base of the step's
  -- queue when it carries none (F.key): then every step with that flow is
  -- in the summary's queue, so the flow alone tells the summary apart.
  -- flows[flow] = { base, {state -> delta} }, in `order` as first met.
  local flows, order = {}, {}
  -- HMGET and HSET of many fields, 1,000 per call (as hmget_chunked and
  -- hset_chunked further down, which this function does not name: each
  -- name it takes from the script is an upvalue that every script, plain
  -- jobs' too, would pay to bind when it builds this function)
  local function mget(key, fields)
    if #fields <= 1000 then return redis.call('HMGET', key, unpack(fields)) end
    local out = {}
    for i = 1, #fields, 1000 do
      local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, #fields)))
      for k = 1, #part do out[#out + 1] = part[k] end
    end
    return out
  end
  local function mset(key, pairs_)
    for i = 1, #pairs_, 1000 do
      redis.call('HSET', key, unpack(pairs_, i, math.min(i + 999, #pairs_)))
    end
  end
  -- the completed "c" steps: their queues' bases and ids, in ack order
  -- (F.done_bases and F.done_ids: settle.lua appends to them itself, a
  -- call per member less)
  F.done_bases, F.done_ids = {}, {}

  -- the deltas of the flow met last (a batch's steps are mostly of one)
  local last_flow, last_d
  function F.later(base, flow, from, to)
    local d = last_d
    if flow ~= last_flow then
      local f = flows[flow]
      if not f then
        f = { base, {} }
        flows[flow] = f
        order[#order + 1] = flow
      end
      d = f[2]
      last_flow, last_d = flow, d
    end
    d[from] = (d[from] or 0) - 1
    d[to] = (d[to] or 0) + 1
  end

  function F.completed_later(base, id)
    local n = #F.done_ids + 1
    F.done_bases[n], F.done_ids[n] = base, id
  end

  -- The children of the steps completed (F.completed_later), released as
  -- F.finished releases them, with one HMGET per hash and queue for the
  -- whole batch (children, child nodes, child states, and released edges
  -- when the queue has any) and one HSET of the nodes it changes. An edge
  -- from a Completed parent is not written to `released`: a Completed
  -- step never finishes again (retry takes Dead steps only), so nothing
  -- would release it twice, and F.first_failed, the other reader, passes
  -- over a parent that is not Dead or Cancelled whether its edge is written
  -- or not. The read stays: a parent retried after a failure released the
  -- edge under run-anyway must not count down again. The same as calling
  -- F.finished at each ack: a completed parent only ever releases, and
  -- releases commute (a count down, the last one making the child Pending
  -- or Scheduled); a failure earlier in the same script that cancelled a
  -- child wrote that child already, and is read here; a failure later in
  -- the script cannot cancel a child that a release here would make
  -- Pending (that release was its last open edge, so the failed parent's
  -- edge was released already, and F.finished skips it); and a release
  -- here of a child that such a later failure cancelled meanwhile changes
  -- what it would have changed before it: the edge and the count, not the
  -- state. A step is acked at most once per script (a second ack of it in
  -- the batch is "lost"), so no edge comes twice. Per edge this walks
  -- flat arrays, not a table per edge: a fan-in's members are thousands.
  function F.release_completed(now)
    local pbases, pids = F.done_bases, F.done_ids
    F.done_bases, F.done_ids = {}, {}
    local n = #pids
    -- each parent's packed children: one HMGET per parent queue (almost
    -- always one)
    local kids
    local single = true
    for i = 2, n do
      if pbases[i] ~= pbases[1] then single = false; break end
    end
    if single then
      kids = mget(pbases[1] .. 'children', pids)
    else
      kids = {}
      local groups, gbases = {}, {}
      for i = 1, n do
        local g = groups[pbases[i]]
        if not g then
          g = { {}, {} }
          groups[pbases[i]] = g
          gbases[#gbases + 1] = pbases[i]
        end
        g[1][#g[1] + 1] = pids[i]
        g[2][#g[2] + 1] = i
      end
      for _, b in ipairs(gbases) do
        local g = groups[b]
        local v = mget(b .. 'children', g[1])
        for j, i in ipairs(g[2]) do kids[i] = v[j] end
      end
    end
    -- the edges in the order F.finished would have met them: child base,
    -- child id and parent id in three arrays; each child queue's children
    -- once
    local ecb, ecid, ep = {}, {}, {}
    local ne = 0
    local per, cbases = {}, {}
    local find, sub = string.find, string.sub
    local lastcb, g
    for i = 1, n do
      local v, pb, p = kids[i], pbases[i], pids[i]
      if v and v ~= '' then
        local k, len = 1, #v
        while k <= len do
          local cid, cb
          if len == 32 then
            -- a fan-in member's: one child, in its own queue
            cid, cb, k = v, pb, 33
          else
            local j = find(v, '\0', k, true) or (len + 1)
            cid, cb = sub(v, k, k + 31), pb
            if j > k + 32 then cb = sub(v, k + 32, j - 1) end
            k = j + 1
          end
          if cb ~= lastcb then
            g = per[cb]
            if not g then
              g = { ids = {}, seen = {}, nodes = {}, left = {}, states = {}, dirty = {} }
              per[cb] = g
              cbases[#cbases + 1] = cb
            end
            lastcb = cb
          end
          if not g.seen[cid] then
            g.seen[cid] = true
            g.ids[#g.ids + 1] = cid
          end
          ne = ne + 1
          ecb[ne], ecid[ne], ep[ne] = cb, cid, p
        end
      end
    end
    for _, cb in ipairs(cbases) do
      local g = per[cb]
      local nodes = mget(cb .. 'nodes', g.ids)
      local states = mget(cb .. 'states', g.ids)
      for j, cid in ipairs(g.ids) do
        local v = nodes[j]
        if v then
          local f = split(v, 6)
          g.nodes[cid] = { cancelled = f[2], position = f[3], policy = f[4], workflow = f[5], step = f[6] }
          -- unfinished parents, a number from here on (1 when unusable,
          -- as F.finished reads it)
          g.left[cid] = int(f[1]) or 1
        end
        v = states[j]
        if v then
          local f = split(v, 10)
          g.states[cid] = { state = f[1], attempts = f[2], run_at = f[3], unique_key = f[4],
            lease_expires_at = f[5], lease_token = f[6], lease_worker = f[7], finished_at = f[8], flow = f[9],
            key = f[10] }
        end
      end
      -- the edges of this queue already released: only Dead or Cancelled
      -- parents write them (run-anyway), so most queues have none
      if redis.call('EXISTS', cb .. 'released') == 1 then
        local fields, at = {}, {}
        for e = 1, ne do
          if ecb[e] == cb then
            fields[#fields + 1] = ecid[e] .. ep[e]
            at[#at + 1] = e
          end
        end
        local found = mget(cb .. 'released', fields)
        g.released = {}
        for m, e in ipairs(at) do
          if found[m] then g.released[e] = true end
        end
      end
    end
    -- the child met last, its state and its count (a fan-in's edges all
    -- go to one child): written back when another child comes
    local lastcid, st, left, marked
    lastcb = nil
    for e = 1, ne do
      local cb, cid = ecb[e], ecid[e]
      if cid ~= lastcid or cb ~= lastcb then
        if lastcid then g.left[lastcid] = left end
        if cb ~= lastcb then
          g = per[cb]
          lastcb = cb
        end
        lastcid = cid
        st = g.nodes[cid] and g.states[cid]
        left = g.left[cid]
        marked = false
      end
      if st and not (g.released and g.released[e]) then
        left = left - 1
        if left < 0 then left = 0 end
        if not marked then
          marked = true
          if not g.dirty[cid] then
            g.dirty[cid] = true
            g.dirty[#g.dirty + 1] = cid
          end
        end
        if left == 0 and st.state == 'waiting' then
          F.ready(cb, cid, st, now)
        end
      end
    end
    if lastcid then g.left[lastcid] = left end
    for _, cb in ipairs(cbases) do
      local g = per[cb]
      local writes = {}
      for _, cid in ipairs(g.dirty) do
        local nd = g.nodes[cid]
        writes[#writes + 1] = cid
        writes[#writes + 1] = fmt(g.left[cid]) .. '\0' .. nd.cancelled .. '\0' .. nd.position .. '\0' .. nd.policy
          .. '\0' .. nd.workflow .. '\0' .. nd.step
      end
      mset(cb .. 'nodes', writes)
    end
  end

  -- Writes what F.later and F.completed_later kept: the releases first
  -- (they move counts too), then one HINCRBY per summary and state whose
  -- count changed, states in name order (a script's writes stay
  -- deterministic). Returns F.woke: whether a job became Pending.
  function F.flush(now)
    if #F.done_ids > 0 then F.release_completed(now) end
    for _, flow in ipairs(order) do
      local f = flows[flow]
      local key, d = F.key(f[1], flow), f[2]
      local names = {}
      for state, delta in pairs(d) do
        if delta ~= 0 then names[#names + 1] = state end
      end
      table.sort(names)
      for _, state in ipairs(names) do
        redis.call('HINCRBY', key, state, fmt(d[state]))
      end
    end
    flows, order, last_flow, last_d = {}, {}, nil, nil
    return F.woke
  end

  -- A step's node (`nodes`): unfinished parents, "1" when a parent's
  -- failure cancelled it (else ""), position (step order, from 0), policy
  -- ("c" cancel, "r" run anyway), workflow id, step name.
  function F.read_node(base, id)
    local v = redis.call('HGET', base .. 'nodes', id)
    if not v then return nil end
    local f = split(v, 6)
    return { unfinished = f[1], cancelled = f[2], position = f[3], policy = f[4], workflow = f[5], step = f[6] }
  end

  function F.write_node(base, id, n)
    redis.call('HSET', base .. 'nodes', id,
      n.unfinished .. '\0' .. n.cancelled .. '\0' .. n.position .. '\0' .. n.policy .. '\0' .. n.workflow .. '\0' .. n.step)
  end

  -- The references packed in `v` (a `parents` or `children` value, or
  -- a summary's `steps`): entries joined by "\0", each a job id (32 hex)
  -- followed by the base of its queue, or by nothing when that is `base`.
  -- Returns { {id, base}, ... } in order.
  function F.refs(v, base)
    local out = {}
    if not v or v == '' then return out end
    local i = 1
    local n = #v
    while i <= n do
      local j = string.find(v, '\0', i, true) or (n + 1)
      local b = string.sub(v, i + 32, j - 1)
      if b == '' then b = base end
      out[#out + 1] = { string.sub(v, i, i + 31), b }
      i = j + 1
    end
    return out
  end

  function F.is_failed(state)
    return state == 'dead' or state == 'cancelled'
  end

  -- The parent a cancelled step `id` of the queue at `base` reports
  -- (`cancelled_by`): its first parent in step order that is Dead or
  -- Cancelled with an unreleased edge, under policy "c"; nil when none.
  function F.first_failed(base, id, node)
    if node.policy ~= 'c' then return nil end
    for _, p in ipairs(F.refs(redis.call('HGET', base .. 'parents', id), base)) do
      if redis.call('HEXISTS', base .. 'released', id .. p[1]) == 0 then
        local st = read_state(p[2], p[1])
        if st and F.is_failed(st.state) then return p[1] end
      end
    end
    return nil
  end

  -- Step `id` of the queue at `base` just became terminal in `state`: each
  -- child whose edge from it is not released yet is released (parent
  -- Completed, or the child runs anyway), its count of unfinished parents
  -- going down by one and, at zero, Waiting -> Pending (run_at now) or
  -- Scheduled (a later run_at kept); or, the parent failed under the
  -- child's "c" policy, a Waiting child becomes Cancelled by the failure,
  -- and its own children follow (a stack, not recursion). The rules of
  -- docs/CONTRACT.md, "Workflows"; a child's keys are in the same slot.
  function F.finished(base, id, state, now)
    local stack = { { base, id, state } }
    while #stack > 0 do
      local top = table.remove(stack)
      local pb, p, pstate = top[1], top[2], top[3]
      for _, c in ipairs(F.refs(redis.call('HGET', pb .. 'children', p), pb)) do
        local cid, cb = c[1], c[2]
        local node = F.read_node(cb, cid)
        local st = node and redis.call('HEXISTS', cb .. 'released', cid .. p) == 0 and read_state(cb, cid)
        if st then
          if pstate == 'completed' or node.policy == 'r' then
            redis.call('HSET', cb .. 'released', cid .. p, '1')
            local left = math.max((int(node.unfinished) or 1) - 1, 0)
            node.unfinished = fmt(left)
            F.write_node(cb, cid, node)
            if left == 0 and st.state == 'waiting' then
              F.ready(cb, cid, st, now)
            end
          elseif st.state == 'waiting' then
            redis.call('ZREM', cb .. 'waiting', cid)
            F.count(cb, st.flow, 'waiting', 'cancelled')
            st.state, st.finished_at = 'cancelled', fmt(now)
            write_state(cb, cid, st)
            redis.call('ZADD', done_key(cb, 'cancelled'), fmt(now), cid)
            node.cancelled = '1'
            F.write_node(cb, cid, node)
            if string.sub(st.flow, 1, 1) == 'c' then
              stack[#stack + 1] = { cb, cid, 'cancelled' }
            end
          end
        end
      end
    end
  end
  flow_lib = F
  return F
end

-- Keyed jobs' rotations (docs/CONTRACT.md, "Keyed jobs"; the reference
-- model is jq-testkit's memory/keys.rs), built on first use like
-- workflows(): claim.lua and peek.lua call it only for a queue that holds
-- a keyed Pending or Scheduled job, so plain jobs' scripts pay for one
-- closure. A rotation `r` is one queue's view for one claim: its key
-- limits, its (priority, key) members, its cursors, and what the claim
-- took so far.
local keyed_lib
local function rotations()
  if keyed_lib then return keyed_lib end
  local K = {}

  -- Queue `base`'s rotation for a claim of at most `limit` jobs at `now`;
  -- `readonly` (peek.lua): its rate logs are counted, not trimmed.
  function K.open(base, limit, now, readonly)
    local cursors = {}
    local flat = redis.call('HGETALL', base .. 'kcursor')
    for i = 1, #flat, 2 do cursors[flat[i]] = flat[i + 1] end
    -- prios: the priorities met so far, highest first (prios.done once
    -- the last is known), pnum: each one's -priority; rings: per
    -- priority, its keys in ring order from the cursor with their heads,
    -- read a page of `kwait` at a time as the walk goes (load_more);
    -- start: per priority, where its next walk starts in its ring; empty:
    -- the priorities a whole walk found nothing at (nothing there can
    -- become eligible later in the claim); taken: the members the claim
    -- took, in order (K.finish removes them with one ZREM).
    -- Per key met: limits, run (its Running jobs counting this claim's
    -- takes), run0 (before this claim), started (its starts in its rate's
    -- window counting this claim's, once read). Flat tables of numbers and
    -- strings, not a table per key: a claim meets a key per job it takes.
    return { base = base, set = base .. 'kwait', limit = limit, now = now, readonly = readonly, limits = {},
      run = {}, run0 = {}, started = {}, prios = {}, pnum = {}, cursors = cursors, rings = {}, start = {},
      empty = {}, taken = {}, yielded = {}, moved = {} }
  end

  -- Limits as `klimits` stores them (key_limits.lua),
  -- "concurrency\0rate_limit\0rate_period" with "" for none, as
  -- { concurrency, rate, period }; nil or "" is no limit.
  local function parse_limits(v)
    local f = split(v or '', 3)
    return { tonumber(f[1]), tonumber(f[2]), tonumber(f[3]) }
  end
  -- Meets the keys of a page of a ring (see load_more): their limits
  -- (`klimits`: field '' the default, a key's field its override) and
  -- Running counts (`krun`) with one HMGET each for the whole page, not
  -- a command per key: a claim walks about as many keys as it takes, and
  -- a command per key was most of a keyed job's cost. A queue with many
  -- overrides still costs a claim only the keys it reads.
  local function meet(r, keys)
    local limits = r.limits
    local fresh = {}
    for _, key in ipairs(keys) do
      if not limits[key] then fresh[#fresh + 1] = key end
    end
    if #fresh == 0 then return end
    local lv = redis.call('HMGET', r.base .. 'klimits', '', unpack(fresh))
    local rv = redis.call('HMGET', r.base .. 'krun', unpack(fresh))
    local default = r.default
    if not default then
      default = parse_limits(lv[1])
      r.default = default
    end
    local run, run0 = r.run, r.run0
    for i, key in ipairs(fresh) do
      -- an override's limits, else the default's (shared: never changed)
      local o = lv[i + 1]
      limits[key] = o and parse_limits(o) or default
      local n = tonumber(rv[i]) or 0
      run[key] = n
      run0[key] = n
    end
  end
  -- A key's limits in rotation `r`, as { concurrency, rate, period } (nil
  -- when none): its override, else the queue's default. Met with its ring
  -- page (meet); read on its own only for a key met no other way.
  local function limits_of(r, key)
    local l = r.limits[key]
    if l then return l end
    meet(r, { key })
    return r.limits[key]
  end
  -- A rate-limited key's starts in its window counting this claim's: its
  -- log is read (and trimmed) once, when the walk first weighs the key.
  local function started_of(r, key, lim)
    local n = r.started[key]
    if n then return n end
    local log = r.base .. 'kstarts:' .. key
    if r.readonly then
      n = redis.call('ZCOUNT', log, '(' .. fmt(r.now - lim[3]), '+inf')
    else
      redis.call('ZREMRANGEBYSCORE', log, '-inf', fmt(r.now - lim[3]))
      n = redis.call('ZCARD', log)
    end
    r.started[key] = n
    return n
  end
  -- How many more jobs `key` may take in this claim by its limits (the
  -- claim's limit when it has none); 0 when it is held back.
  local function room(r, key)
    local lim = limits_of(r, key)
    local n = r.limit
    if lim[1] then
      local free = lim[1] - r.run[key]
      if free < n then n = free end
    end
    if lim[2] and lim[3] then
      local free = lim[2] - started_of(r, key, lim)
      if free < n then n = free end
    end
    return n
  end
  -- The `i`-th priority of rotation `r` with a keyed Pending job, highest
  -- first (11 digits, as kprio), or nil.
  local function prio(r, i)
    local prios = r.prios
    while #prios < i and not prios.done do
      local m
      if #prios == 0 then
        m = redis.call('ZRANGE', r.set, '0', '0')[1]
      else
        -- keys are UTF-8, so no member holds the byte 255
        m = redis.call('ZRANGEBYLEX', r.set, '[' .. prios[#prios] .. '\255', '+', 'LIMIT', '0', '1')[1]
      end
      if m then
        local enc = string.sub(m, 1, 11)
        prios[#prios + 1] = enc
        r.pnum[enc] = tonumber(enc) - 5000000000
      else
        prios.done = true
      end
    end
    return prios[i]
  end

  -- Reads the next page of priority `enc`'s ring: its members in
  -- `kwait` after the cursor's key in byte order (phase 1), then from
  -- the smallest key up to the cursor's own (phase 2). Each key met is a
  -- ring position with its members read (`heads`, in claim order), and
  -- meets (its limits and Running count); false when the ring is read
  -- whole. A page holds about two members per job the claim may still
  -- take (a key at a limit of one, with a job behind its head, needs
  -- two); a full page's last key may have members past the page (`cut`),
  -- read when the claim needs them (more_of), and the next page starts
  -- past that key, so a deep key costs a page one member per job it may
  -- still take, not its backlog.
  -- The ZRANGEBYLEX bounds of priority `enc`'s next page: in phase 1 the
  -- members after the cursor's key (all of the priority's without a
  -- cursor), in phase 2 those up to the cursor's key, its own included;
  -- after `last` (past a key's members) when a page was read before.
  local function bounds(enc, cursor, phase, last)
    local lo, hi
    if last then
      lo = '(' .. last
    elseif phase == 1 then
      lo = cursor and ('(' .. enc .. cursor .. '\0\255') or ('[' .. enc)
    else
      lo = '[' .. enc
    end
    if phase == 1 then
      hi = '[' .. enc .. '\255'
    else
      hi = '[' .. enc .. cursor .. '\0\255'
    end
    return lo, hi
  end
  local find, sub, match = string.find, string.sub, string.match
  local function load_more(r, enc, ring)
    local cursor = r.cursors[enc]
    while not ring.full do
      local lo, hi = bounds(enc, cursor, ring.phase, ring.last)
      local size = 2 * (r.limit - #r.taken) + 8
      if size > 1000 then size = 1000 end
      local page = redis.call('ZRANGEBYLEX', r.set, lo, hi, 'LIMIT', '0', fmt(size))
      local keys, heads = ring.keys, ring.heads
      local n = #keys
      local fresh = {}
      -- the members of the key met last start with pfx (its priority,
      -- key and NUL): a plain find tells, where cutting out each
      -- member's key would make a string of it
      local pfx, h
      for _, m in ipairs(page) do
        if pfx and find(m, pfx, 1, true) == 1 then
          h[#h + 1] = m
        else
          local p = find(m, '\0', 12, true)
          local key = sub(m, 12, p - 1)
          pfx = sub(m, 1, p)
          h = { m }
          n = n + 1
          keys[n] = key
          heads[n] = h
          fresh[#fresh + 1] = key
        end
      end
      if #page < size then
        if ring.phase == 1 and cursor then
          ring.phase, ring.last = 2, nil
        else
          ring.full = true
        end
      else
        ring.cut[n] = true
        ring.last = pfx .. '\255'
      end
      if #fresh > 0 then
        meet(r, fresh)
        return true
      end
    end
    return false
  end

  -- The members of the key at ring position `pos` past those read, up to
  -- `n` (its room: a key's room only shrinks as the claim goes), appended
  -- to its heads; the key is read whole once fewer come.
  local function more_of(r, enc, ring, pos, n)
    local h = ring.heads[pos]
    local last = h[#h]
    local got = redis.call('ZRANGEBYLEX', r.set, '(' .. last, '[' .. sub(last, 1, 12 + #ring.keys[pos]) .. '\255',
      'LIMIT', '0', fmt(n))
    for _, m in ipairs(got) do h[#h + 1] = m end
    if #got < n then ring.cut[pos] = nil end
  end

  -- The first position from..to (to nil: to the ring's end) of priority
  -- `enc`'s ring whose key is eligible (room left, a job not taken yet at
  -- that priority); nil when none. Returns it, the key and the member to
  -- take.
  local function scan(r, enc, ring, from, to)
    local keys, heads, nx, cut = ring.keys, ring.heads, ring.nx, ring.cut
    local pos = from
    while not to or pos <= to do
      if pos > #keys and not load_more(r, enc, ring) then return nil end
      local key = keys[pos]
      local n = room(r, key)
      if n > 0 then
        local i = nx[pos] or 1
        local m = heads[pos][i]
        if not m and cut[pos] then
          more_of(r, enc, ring, pos, n)
          m = heads[pos][i]
        end
        if m then return pos, key, m end
      end
      pos = pos + 1
    end
    return nil
  end

  -- The rotation's next job: from the highest priority with an eligible
  -- key, the first such key after the cursor (wrapping around, the
  -- cursor's own key last); nil when none. Returns the priority's
  -- encoding, the key, its `kwait` member and the key's place in the
  -- ring.
  local function next_of(r)
    local i = 1
    while true do
      local enc = prio(r, i)
      if not enc then return nil end
      if not r.empty[enc] then
        local ring = r.rings[enc]
        if not ring then
          ring = { keys = {}, heads = {}, nx = {}, cut = {}, phase = 1, full = false }
          r.rings[enc] = ring
        end
        local s = r.start[enc] or 1
        local pos, key, m = scan(r, enc, ring, s, nil)
        if not pos and s > 1 then pos, key, m = scan(r, enc, ring, 1, s - 1) end
        if pos then return enc, key, m, pos end
        r.empty[enc] = true
      end
      i = i + 1
    end
  end

  -- The claim of rotation `r` when there is nothing to merge (claim.lua
  -- asks only for one queue with no plain job to take) and every key
  -- follows the queue's default of one Running job, with no rate: then
  -- a key yields at most one job per claim, so each priority's ring is
  -- walked once from its cursor, and the first member of each key with no
  -- Running job is taken, the jobs K.merge would take in the same order,
  -- without its per-job bookkeeping (heads, starts, effective run_at).
  -- Takes at most `max`, calling keyed(1, key, id) for each; false,
  -- having changed nothing, when the limits are not those (any override
  -- or another default).
  function K.take_singles(r, max, keyed)
    local klimits = r.base .. 'klimits'
    if redis.call('HLEN', klimits) ~= 1 then return false end
    local default = parse_limits(redis.call('HGET', klimits, ''))
    if default[1] ~= 1 or default[2] then return false end
    local set, run, run0, taken = r.set, r.run, r.run0, r.taken
    local krun = r.base .. 'krun'
    -- Running counts: when no more keys run than the claim may take (the
    -- field '' aside), all of them in one read, rather than one HMGET
    -- field per key walked (at least one per job taken)
    local running
    if redis.call('HLEN', krun) <= max + 1 then
      running = {}
      local flat = redis.call('HGETALL', krun)
      for k = 1, #flat, 2 do running[flat[k]] = flat[k + 1] end
    end
    local read_members, read_keys = 0, 0
    local i = 1
    while #taken < max do
      local enc = prio(r, i)
      if not enc then break end
      local cursor = r.cursors[enc]
      local phase, last, moved = 1, nil, nil
      while #taken < max do
        local lo, hi = bounds(enc, cursor, phase, last)
        -- as many members as the jobs still to take need, by the members
        -- per key the claim's pages held so far (one at first: a drained
        -- queue's keys hold one job each, the key just claimed may hold
        -- more), and a few more for keys held back
        local size = (max - #taken) * (read_keys > 0 and read_members / read_keys or 1) + 8
        size = size - size % 1
        if size > 1000 then size = 1000 end
        local page = redis.call('ZRANGEBYLEX', set, lo, hi, 'LIMIT', '0', fmt(size))
        -- the page's keys, each with its first member (its head), and
        -- those not met before, whose Running counts one HMGET reads
        local keys, heads, fresh = {}, {}, {}
        local prev
        -- (numeric loops and one match per member: in this loop every
        -- function call, ipairs' iterator included, is a cost per job)
        for k = 1, #page do
          local m = page[k]
          local key = match(m, '^%Z*', 12)
          if key ~= prev then
            keys[#keys + 1] = key
            heads[#heads + 1] = m
            prev = key
            if not run[key] then fresh[#fresh + 1] = key end
          end
        end
        read_members, read_keys = read_members + #page, read_keys + #keys
        if #fresh > 0 then
          local rv = running or redis.call('HMGET', krun, unpack(fresh))
          for j = 1, #fresh do
            local key = fresh[j]
            local v
            if running then v = running[key] else v = rv[j] end
            local n = v and tonumber(v) or 0
            run[key], run0[key] = n, n
          end
        end
        for j = 1, #keys do
          local key = keys[j]
          if run[key] < 1 then
            run[key] = run[key] + 1
            local m = heads[j]
            taken[#taken + 1] = m
            moved = key
            -- the id follows the run_at's 20 digits
            keyed(1, key, sub(m, 33 + #key))
            if #taken >= max then break end
          end
        end
        if #page < size then
          if phase == 1 and cursor then
            phase, last = 2, nil
          else
            break
          end
        else
          last = enc .. prev .. '\0\255'
        end
      end
      if moved then r.moved[enc] = moved end
      i = i + 1
    end
    return true
  end

  -- The merge of `candidates` (plain jobs in claim order, as claim.lua
  -- builds them: { -priority, ready member, base, id or false, queue
  -- index }) with the rotations `rot` (queue index -> rotation) of queues
  -- 1..n: the smallest of the streams' next jobs by (priority desc,
  -- effective run_at, plain before keyed, queue index; queue indexes
  -- follow queue names), a rotation job's effective run_at being the
  -- latest run_at its rotation yielded at that priority in this claim. At
  -- most `limit` jobs, none of a queue for which open(q) is false; calls
  -- plain(c) or keyed(q, key, ready member, rated, effective run_at,
  -- -priority) for each job taken, in order.
  function K.merge(candidates, rot, n, limit, open, plain, keyed)
    local sub = string.sub
    local pi = 1
    local count = 0
    while count < limit do
      while candidates[pi] and not open(candidates[pi][5]) do
        pi = pi + 1
      end
      -- the best so far: -priority, run_at (20 digits), and its queue
      -- index (nil: the plain candidate c), which with "plain before
      -- keyed" and queue order is the whole comparison: every keyed
      -- stream is looked at in queue order, after the plain one
      local bp, brun, bq, benc, bkey, bm, bi
      local c = candidates[pi]
      if c then bp, brun = c[1], sub(c[2], 1, 20) end
      for q = 1, n do
        local r = rot[q]
        if r and open(q) then
          local enc, key, m, i = next_of(r)
          if enc then
            local p = r.pnum[enc]
            -- the member's run_at follows its priority, key and NUL
            local run_at = sub(m, 13 + #key, 32 + #key)
            local y = r.yielded[enc]
            if y and y > run_at then run_at = y end
            -- ties go to the earlier stream (plain, then lower queue index)
            if not bp or p < bp or (p == bp and run_at < brun) then
              bp, brun, bq, benc, bkey, bm, bi = p, run_at, q, enc, key, m, i
            end
          end
        end
      end
      if not bp then break end
      count = count + 1
      if not bq then
        pi = pi + 1
        plain(c)
      else
        local r = rot[bq]
        local nx = r.rings[benc].nx
        nx[bi] = (nx[bi] or 1) + 1
        r.taken[#r.taken + 1] = bm
        r.start[benc] = bi + 1
        r.moved[benc] = bkey
        r.yielded[benc] = brun
        r.run[bkey] = r.run[bkey] + 1
        local lim = r.limits[bkey]
        local rated = lim[2] and lim[3] and true or false
        if rated then r.started[bkey] = r.started[bkey] + 1 end
        keyed(bq, bkey, sub(bm, 13 + #bkey), rated, brun, bp)
      end
    end
  end

  -- Writes what the claim took of rotation `r`: its jobs out of
  -- `kwait` (members this script read, so each is there) with one ZREM,
  -- the Pending count, and the cursors it moved (moved: priority -> key).
  function K.finish(r)
    local taken = r.taken
    if #taken > 0 then
      -- (in chunks of 1,000 as zrem_chunked further down, which this
      -- function does not name: see F's mget)
      for i = 1, #taken, 1000 do
        redis.call('ZREM', r.set, unpack(taken, i, math.min(i + 999, #taken)))
      end
      redis.call('DECRBY', r.base .. 'kpending', fmt(#taken))
    end
    -- one priority per claim, as a rule: one HSET
    for enc, key in pairs(r.moved) do
      redis.call('HSET', r.base .. 'kcursor', enc, key)
    end
  end

  keyed_lib = K
  return K
end

-- Pending when due (delay zero), else Scheduled; returns the new state.
local function requeue(base, id, st, priority, now, delay)
  if delay <= 0 then
    make_pending(base, id, st, priority, now)
    return 'pending'
  end
  make_scheduled(base, id, st, now + delay)
  return 'scheduled'
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

-- Job `id`, live again, holds unique key `uk` (beside any live holder).
local function unique_take(base, uk, id)
  local v = redis.call('HGET', base .. 'unique', uk)
  local ids = {}
  if v then
    for other in string.gmatch(v, '[^,]+') do
      if other == id then return end
      ids[#ids + 1] = other
    end
  end
  ids[#ids + 1] = id
  table.sort(ids)
  redis.call('HSET', base .. 'unique', uk, table.concat(ids, ','))
end

-- Job `id` left the live states: it no longer holds unique key `uk`
-- (nil or "" when it has none).
local function unique_release(base, uk, id)
  if not uk or uk == '' then return end
  local v = redis.call('HGET', base .. 'unique', uk)
  if v == id then
    redis.call('HDEL', base .. 'unique', uk)
  elseif v and string.find(v, ',', 1, true) then
    local rest = {}
    for other in string.gmatch(v, '[^,]+') do
      if other ~= id then rest[#rest + 1] = other end
    end
    redis.call('HSET', base .. 'unique', uk, table.concat(rest, ','))
  end
end

-- Moves a job (state table `st`, out of the index it was in) to a
-- terminal state and frees its unique key.
local function make_terminal(base, id, st, state, now)
  local F = st.flow and st.flow ~= '' and workflows()
  if F then F.count(base, st.flow, st.state, state) end
  leave(base, st)
  st.state, st.finished_at = state, fmt(now)
  clear_lease(st)
  write_state(base, id, st)
  redis.call('ZADD', done_key(base, state), fmt(now), id)
  unique_release(base, st.unique_key, id)
  if F and string.sub(st.flow, 1, 1) == 'c' then
    F.finished(base, id, state, now)
  end
  return state
end

-- Appends {"attempt":n,"at":micros,"message":"..."} to the job's errors
-- (a JSON array kept as text, so appending never re-encodes old entries).
local function append_error(base, id, attempt, now, message)
  local item = '{"attempt":' .. fmt(attempt) .. ',"at":' .. fmt(now) .. ',"message":' .. cjson.encode(message) .. '}'
  local cur = redis.call('HGET', base .. 'errors', id)
  if not cur or cur == '' or cur == '[]' then
    cur = '[' .. item .. ']'
  else
    cur = string.sub(cur, 1, -2) .. ',' .. item .. ']'
  end
  redis.call('HSET', base .. 'errors', id, cur)
end

-- `command key items...` in chunks of 1,000 items, so unpack stays small
-- (it fails near 8,000). The chunk size is even, so (score, member) pairs
-- of a ZADD never split.
local function call_chunked(command, key, items)
  local n = #items
  local i = 1
  while i <= n do
    local j = math.min(i + 999, n)
    redis.call(command, key, unpack(items, i, j))
    i = j + 1
  end
end

-- ZREM of many members.
local function zrem_chunked(key, members)
  call_chunked('ZREM', key, members)
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

-- Many keyed jobs leave Running at once (`by_key`: key -> how many, `keys`
-- its keys as a list): what krun_leave does per job, for a batch. Counts
-- are sums, so one HMGET and one HSET and/or HDEL do it; a key left with
-- none leaves the hash.
local function krun_leave_many(base, by_key, keys)
  if #keys == 0 then return end
  local counts = hmget_chunked(base .. 'krun', keys)
  local kept, dropped = {}, {}
  for i = 1, #keys do
    local key = keys[i]
    local n = (counts[i] and tonumber(counts[i]) or 0) - by_key[key]
    if n > 0 then
      kept[#kept + 1] = key
      kept[#kept + 1] = fmt(n)
    else
      dropped[#dropped + 1] = key
    end
  end
  hset_chunked(base .. 'krun', kept)
  call_chunked('HDEL', base .. 'krun', dropped)
end

-- Moves a job whose stored fields are unusable to Dead, with the reason as
-- the error of attempt `attempt` (0 when that is unknown too). The caller
-- has taken the job out of the index it was in.
local function bury_corrupt(base, id, st, attempt, now, reason)
  append_error(base, id, attempt or 0, now, reason)
  return make_terminal(base, id, st, 'dead', now)
end

-- Makes due Scheduled job `id` Pending, its run_at kept (promote, and a
-- claim's promotion of its queues' due keyed jobs); the caller has taken
-- it out of its Scheduled index. A job whose priority or run_at is
-- unusable goes to Dead instead; returns the reason then, else nil.
local function promote_due(base, id, now)
  local st = read_state(base, id)
  if not st then return nil end
  local priority, run_at = int(read_body(base, id).priority), int(st.run_at)
  if priority and run_at then
    make_pending(base, id, st, priority, run_at)
    return nil
  end
  local reason = 'job ' .. id .. ' is corrupt in storage: '
    .. (priority and unusable('run_at', st.run_at) or unusable('priority', read_body(base, id).priority))
    .. ' (found when it was due)'
  bury_corrupt(base, id, st, int(st.attempts), now, reason)
  return reason
end

-- Stores new jobs as enqueue.lua describes (one place for enqueue.lua and
-- fire.lua): `bases` per queue index, `now` their created_at, `channel`
-- PUBLISHed once when a job became Pending, and 12 values per job in
-- `args` from index `first` + 1 on. Returns one value per job: "" when
-- stored, else the id of the job answered instead: the same id when it is
-- stored already (a resend), or the live job of its queue with its unique
-- key.
local function store_jobs(bases, now, channel, args, first)
  local n = (#args - first) / 12
  -- per queue index: the batch's ids, to learn in one HMGET which exist
  local asked = {}
  for q = 1, #bases do asked[q] = {} end
  for j = 0, n - 1 do
    local a = first + j * 12
    local t = asked[tonumber(args[a + 2])]
    t[#t + 1] = args[a + 1]
  end
  -- per queue index: id -> state of the jobs stored (or stored by this batch)
  local known = {}
  -- per queue index: true when its hashes lack the HASHTABLE field
  local fresh = {}
  for q = 1, #bases do
    local k = {}
    local n_asked = #asked[q]
    if n_asked > 0 then
      asked[q][n_asked + 1] = ''
      local states = hmget_chunked(bases[q] .. 'states', asked[q])
      for i = 1, n_asked do
        if states[i] then k[asked[q][i]] = string.match(states[i], '^%Z*') end
      end
      -- the queue's hashes are new (or were deleted from outside)
      fresh[q] = not states[n_asked + 1]
    end
    known[q] = k
  end
  -- per queue index: HSET arguments for jobs and states, ZADD arguments
  -- for ready, scheduled, ids, kwait and kscheduled
  local bodies, states, ready, scheduled, ids, kwait, kscheduled = {}, {}, {}, {}, {}, {}, {}
  for q = 1, #bases do
    bodies[q], states[q], ready[q], scheduled[q], ids[q], kwait[q], kscheduled[q] = {}, {}, {}, {}, {}, {}, {}
    if fresh[q] then
      bodies[q][1], bodies[q][2] = '', HASHTABLE
      states[q][1], states[q][2] = '', HASHTABLE
    end
  end
  local result = {}
  local woke = false
  for j = 0, n - 1 do
    local a = first + j * 12
    local id, qi, uk = args[a + 1], tonumber(args[a + 2]), args[a + 8]
    local key = args[a + 12]
    local base = bases[qi]
    local k = known[qi]
    local existing = false
    if k[id] then
      existing = id
    elseif uk ~= '' then
      local other = unique_holder(base, uk)
      if other then
        local st = k[other]
        if st == nil then
          local v = redis.call('HGET', base .. 'states', other)
          st = v and string.match(v, '^%Z*') or false
          k[other] = st
        end
        if st == 'scheduled' or st == 'pending' or st == 'running' then
          existing = other
        end
      end
    end
    if existing then
      result[j + 1] = existing
    else
      result[j + 1] = ''
      local priority, run_at, member = args[a + 5], args[a + 6], args[a + 9]
      local state = 'scheduled'
      if member ~= '' then state = 'pending' end
      k[id] = state
      local t = bodies[qi]
      t[#t + 1] = id
      t[#t + 1] = args[a + 3] .. '\0' .. args[a + 4] .. '\0' .. priority .. '\0' .. args[a + 7] .. '\0' .. now .. '\0'
        .. args[a + 10]
      t = states[qi]
      t[#t + 1] = id
      t[#t + 1] = state .. '\0' .. '0\0' .. run_at .. '\0' .. uk .. '\0\0\0\0'
      if key ~= '' then t[#t] = t[#t] .. '\0\0' .. key end
      if args[a + 11] ~= '' then
        redis.call('HSET', base .. 'extra', id, args[a + 11] .. '\0\0\0')
      end
      if uk ~= '' then
        redis.call('HSET', base .. 'unique', uk, id)
      end
      if key ~= '' then
        -- a keyed job: its key's sets, never the plain ones
        if member ~= '' then
          woke = true
          t = kwait[qi]
          t[#t + 1] = '0'
          t[#t + 1] = kwait_member(tonumber(priority), key, member)
        else
          t = kscheduled[qi]
          t[#t + 1] = run_at
          t[#t + 1] = id
        end
      elseif member ~= '' then
        woke = true
        t = ready[qi]
        t[#t + 1] = fmt(-tonumber(priority))
        t[#t + 1] = member
      else
        t = scheduled[qi]
        t[#t + 1] = run_at
        t[#t + 1] = id
      end
      t = ids[qi]
      t[#t + 1] = '0'
      t[#t + 1] = id
    end
  end
  for q = 1, #bases do
    local base = bases[q]
    hset_chunked(base .. 'jobs', bodies[q])
    hset_chunked(base .. 'states', states[q])
    zadd_chunked(base .. 'ready', ready[q])
    zadd_chunked(base .. 'scheduled', scheduled[q])
    zadd_chunked(base .. 'ids', ids[q])
    if #kwait[q] > 0 then
      zadd_chunked(base .. 'kwait', kwait[q])
      redis.call('INCRBY', base .. 'kpending', fmt(#kwait[q] / 2))
    end
    zadd_chunked(base .. 'kscheduled', kscheduled[q])
  end
  if woke then
    redis.call('PUBLISH', channel, '1')
  end
  return result
end
