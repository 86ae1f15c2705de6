-- purge.lua: deletes up to `batch` jobs of one queue in a terminal state
-- that finished before a given instant.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  state ("completed" | "dead" | "cancelled")
-- ARGV[2]  older_than (microseconds, exclusive)
-- ARGV[3]  batch size (the caller calls again while a full batch was deleted)
-- Returns how many jobs were deleted.
--
-- A job's result goes with it; a workflow step's node, edges and count in
-- its workflow's summary too (its parents keep naming it as a child, and
-- the reads leave out children that are gone; its children keep the edge).
-- A queue that never held a step or a result pays one EXISTS for that,
-- one more for durable jobs' keys, and one more for the unique period's
-- index (`ucreated`).

local base = KEYS[1]
local done = done_key(base, ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', done, '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
if #ids > 0 then
  if redis.call('EXISTS', base .. 'nodes', base .. 'results') > 0 then
    local states = hmget_chunked(base .. 'states', ids)
    for i, id in ipairs(ids) do
      local flow = states[i] and split(states[i], 10)[9] or ''
      if flow ~= '' then
        redis.call('HINCRBY', workflows().key(base, flow), ARGV[1], '-1')
        local parents = workflows().refs(redis.call('HGET', base .. 'parents', id), base)
        for _, p in ipairs(parents) do
          redis.call('HDEL', base .. 'released', id .. p[1])
        end
      end
    end
    for _, key in ipairs({ 'results', 'nodes', 'parents', 'children' }) do
      call_chunked('HDEL', base .. key, ids)
    end
  end
  -- A purged job leaves the unique period's index (core.lua); a queue
  -- that never held a unique key pays one EXISTS for that.
  if redis.call('EXISTS', base .. 'ucreated') > 0 then
    local states = hmget_chunked(base .. 'states', ids)
    local bodies = hmget_chunked(base .. 'jobs', ids)
    local gone = {}
    for i, id in ipairs(ids) do
      local uk = states[i] and split(states[i], 10)[4] or ''
      if uk ~= '' and bodies[i] then gone[#gone + 1] = ucreated_member(uk, body_created(bodies[i]), id) end
    end
    zrem_chunked(base .. 'ucreated', gone)
  end
  -- a durable job's journal, signals and wait (durable.lua): one EXISTS
  -- for a queue that never held one
  if redis.call('EXISTS', base .. 'durable') > 0 then
    local marks = hmget_chunked(base .. 'durable', ids)
    for i, id in ipairs(ids) do
      if marks[i] then redis.call('DEL', base .. 'journal:' .. id, base .. 'signals:' .. id) end
    end
    for _, key in ipairs({ 'durable', 'jbytes', 'waits' }) do
      call_chunked('HDEL', base .. key, ids)
    end
  end
  for _, key in ipairs({ 'jobs', 'states', 'errors', 'extra' }) do
    call_chunked('HDEL', base .. key, ids)
  end
  zrem_chunked(done, ids)
  zrem_chunked(base .. 'ids', ids)
end
return #ids
