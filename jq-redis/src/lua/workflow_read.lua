-- workflow_read.lua: the reads of WorkflowStorage, changing nothing.
--
-- KEYS[1]  base of the job's queue (or, for "workflow" and "steps", of
--          the queue holding the workflow's summary)
-- ARGV[1]  what to read:
--   "result" <id>     -> { "ok", result } ("" when none), or { "notfound" }
--   "links" <id>      -> { "ok" } for a plain job; { "ok", unfinished,
--                        cancelled_by ("" = none), policy, workflow id,
--                        step, parents (ids, 32 hex each, concatenated),
--                        children (the same, those still stored) };
--                        { "notfound" }
--   "parents" <id>    -> { "ok", then 4 values per parent still stored:
--                        id, step, state, result ("" when none) }
--   "workflow" <wid>  -> { "ok", then a state and its count per state }
--                        or { "notfound" }
--   "steps" <wid>     -> { "ok", then 5 values per step still stored: id,
--                        name, kind, state, parents (concatenated) } or
--                        { "notfound" }

local base, op, key = KEYS[1], ARGV[1], ARGV[2]
local F = workflows()
local STATES = { 'waiting', 'scheduled', 'pending', 'running', 'completed', 'dead', 'cancelled' }

local function state_of(b, id)
  local v = redis.call('HGET', b .. 'states', id)
  return v and string.match(v, '^%Z*')
end

local function parent_ids(b, id)
  local out = {}
  for _, p in ipairs(F.refs(redis.call('HGET', b .. 'parents', id), b)) do out[#out + 1] = p[1] end
  return table.concat(out)
end

if op == 'workflow' or op == 'steps' then
  local summary = base .. 'wf:' .. key
  if redis.call('EXISTS', summary) == 0 then return { 'notfound' } end
  local out = { 'ok' }
  if op == 'workflow' then
    local counts = redis.call('HMGET', summary, unpack(STATES))
    for i, state in ipairs(STATES) do
      out[#out + 1] = state
      out[#out + 1] = counts[i] or '0'
    end
    return out
  end
  for _, s in ipairs(F.refs(redis.call('HGET', summary, 'steps'), base)) do
    local id, b = s[1], s[2]
    local st = read_state(b, id)
    local node = st and F.read_node(b, id)
    if node then
      out[#out + 1] = id
      out[#out + 1] = node.step
      out[#out + 1] = read_body(b, id).kind or ''
      out[#out + 1] = st.state
      out[#out + 1] = parent_ids(b, id)
    end
  end
  return out
end

local st = read_state(base, key)
if not st then return { 'notfound' } end
if op == 'result' then
  return { 'ok', redis.call('HGET', base .. 'results', key) or '' }
end
local node = F.read_node(base, key)
if not node then return { 'ok' } end
if op == 'links' then
  local cancelled_by = ''
  if node.cancelled == '1' and st.state == 'cancelled' then
    cancelled_by = F.first_failed(base, key, node) or ''
  end
  local kids = {}
  for _, c in ipairs(F.refs(redis.call('HGET', base .. 'children', key), base)) do
    if redis.call('HEXISTS', c[2] .. 'nodes', c[1]) == 1 then kids[#kids + 1] = c[1] end
  end
  return { 'ok', node.unfinished, cancelled_by, node.policy, node.workflow, node.step, parent_ids(base, key),
    table.concat(kids) }
end
-- "parents"
local out = { 'ok' }
for _, p in ipairs(F.refs(redis.call('HGET', base .. 'parents', key), base)) do
  local id, b = p[1], p[2]
  local state = state_of(b, id)
  if state then
    local pn = F.read_node(b, id)
    out[#out + 1] = id
    out[#out + 1] = pn and pn.step or ''
    out[#out + 1] = state
    out[#out + 1] = redis.call('HGET', b .. 'results', id) or ''
  end
end
return out
