-- workflow_enqueue.lua: stores every step of a workflow or none
-- (WorkflowStorage::enqueue_workflow), with its summary.
--
-- KEYS[q]  base of each queue the workflow's steps go to; KEYS[1] holds
--          the workflow's summary `wf:<workflow id>` (schema.rs)
-- ARGV[1]  now (microseconds): created_at of every step
-- ARGV[2]  wake-up channel (PUBLISHed once when a step became Pending)
-- ARGV[3]  workflow id (32 hex)
-- ARGV[4]  the steps in step order, packed as workflows().refs in common/workflows.lua reads
--          them (relative to KEYS[1]): the summary's field `steps`
-- then 16 values per step, all computed by the client:
--   id (32 hex), queue index (1-based into KEYS), kind, payload, priority,
--   run_at (microseconds), max_attempts, ready member ("" unless Pending),
--   trace ("" = none), timeout in milliseconds ("" = none), state
--   ("waiting" | "pending" | "scheduled"), flow (the state value's ninth
--   field), node (the `nodes` value), parents and children (packed refs,
--   relative to the step's own queue; "" = none), key ("" = none: a
--   keyed step's state value has it as a tenth field, and it goes to its
--   key's sets, schema.rs)
-- Returns { "ok" } when stored; { "stored", steps } when the workflow is
-- stored already (a resend: nothing written); { "exists", id } when a
-- step's job id is stored already outside it (nothing written).

local now, channel, wid = ARGV[1], ARGV[2], ARGV[3]
local summary = KEYS[1] .. 'wf:' .. wid
local steps = redis.call('HGET', summary, 'steps')
if steps then return { 'stored', steps } end
local PER = 16
local n = (#ARGV - 4) / PER

-- every check before the first write: Redis does not roll a script back
local asked = {}
for q = 1, #KEYS do asked[q] = {} end
for j = 0, n - 1 do
  local a = 4 + j * PER
  local t = asked[tonumber(ARGV[a + 2])]
  t[#t + 1] = ARGV[a + 1]
end
for q = 1, #KEYS do
  if #asked[q] > 0 then
    local found = hmget_chunked(KEYS[q] .. 'states', asked[q])
    for i = 1, #asked[q] do
      if found[i] then return { 'exists', asked[q][i] } end
    end
  end
end

local bodies, states, ready, scheduled, waiting, ids, nodes, parents, children = {}, {}, {}, {}, {}, {}, {}, {}, {}
for q = 1, #KEYS do
  bodies[q], states[q], ready[q], scheduled[q], waiting[q], ids[q] = {}, {}, {}, {}, {}, {}
  nodes[q], parents[q], children[q] = {}, {}, {}
end
local function push(t, a, b)
  t[#t + 1] = a
  t[#t + 1] = b
end
local counts = {}
local woke = false
for j = 0, n - 1 do
  local a = 4 + j * PER
  local id, q = ARGV[a + 1], tonumber(ARGV[a + 2])
  local base = KEYS[q]
  local priority, run_at, member, state = ARGV[a + 5], ARGV[a + 6], ARGV[a + 8], ARGV[a + 11]
  push(bodies[q], id, ARGV[a + 3] .. '\0' .. ARGV[a + 4] .. '\0' .. priority .. '\0' .. ARGV[a + 7] .. '\0' .. now
    .. '\0' .. ARGV[a + 9])
  -- state, attempts 0, run_at, no unique key, no lease, no finished_at, flow
  local key = ARGV[a + 16]
  if key == '' then
    push(states[q], id, state .. '\0' .. '0\0' .. run_at .. '\0\0\0\0\0\0' .. ARGV[a + 12])
  else
    push(states[q], id, state .. '\0' .. '0\0' .. run_at .. '\0\0\0\0\0\0' .. ARGV[a + 12] .. '\0' .. key)
  end
  if ARGV[a + 10] ~= '' then
    redis.call('HSET', base .. 'extra', id, ARGV[a + 10] .. '\0\0\0')
  end
  if state == 'pending' then
    woke = true
    if key ~= '' then
      kready_add(base, key, tonumber(priority), member)
    else
      push(ready[q], fmt(-tonumber(priority)), member)
    end
  elseif state == 'scheduled' then
    if key ~= '' then
      redis.call('ZADD', base .. 'kscheduled', run_at, id)
    else
      push(scheduled[q], run_at, id)
    end
  else
    push(waiting[q], '0', id)
  end
  push(ids[q], '0', id)
  push(nodes[q], id, ARGV[a + 13])
  if ARGV[a + 14] ~= '' then push(parents[q], id, ARGV[a + 14]) end
  if ARGV[a + 15] ~= '' then push(children[q], id, ARGV[a + 15]) end
  counts[state] = (counts[state] or 0) + 1
end
for q = 1, #KEYS do
  local base = KEYS[q]
  if #bodies[q] > 0 then
    redis.call('HSETNX', base .. 'jobs', '', HASHTABLE)
    redis.call('HSETNX', base .. 'states', '', HASHTABLE)
  end
  hset_chunked(base .. 'jobs', bodies[q])
  hset_chunked(base .. 'states', states[q])
  zadd_chunked(base .. 'ready', ready[q])
  zadd_chunked(base .. 'scheduled', scheduled[q])
  zadd_chunked(base .. 'waiting', waiting[q])
  zadd_chunked(base .. 'ids', ids[q])
  hset_chunked(base .. 'nodes', nodes[q])
  hset_chunked(base .. 'parents', parents[q])
  hset_chunked(base .. 'children', children[q])
end
local fields = { 'steps', ARGV[4] }
for state, count in pairs(counts) do
  push(fields, state, fmt(count))
end
redis.call('HSET', summary, unpack(fields))
if woke then
  redis.call('PUBLISH', channel, '1')
end
return { 'ok' }
