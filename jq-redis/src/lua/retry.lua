-- retry.lua: an operator's retry of a Dead job: Dead -> Pending.
--
-- KEYS[1]  base of the job's queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  id (32 hex)
-- ARGV[3]  wake-up channel
-- Returns "ok", "notfound", or the job's state when it is not Dead.
-- run_at becomes now, finished_at and the lease are cleared, errors are kept
-- and max_attempts becomes at least attempts + 1.

local base, now, id = KEYS[1], tonumber(ARGV[1]), ARGV[2]
local st = read_state(base, id)
if not st then return 'notfound' end
if st.state ~= 'dead' then return st.state end
local b = read_body(base, id)
local attempts, max_attempts = int(st.attempts) or 0, int(b.max_attempts) or 0
redis.call('ZREM', done_key(base, 'dead'), id)
if max_attempts < attempts + 1 and b.kind then
  b.max_attempts = fmt(attempts + 1)
  write_body(base, id, b)
end
make_pending(base, id, st, int(b.priority) or 0, now)
-- an operator's new start: no cancel request carried over
local x = read_extra(base, id)
if x.cancel_at ~= '' then
  x.cancel_at, x.cancel_reason = '', ''
  write_extra(base, id, x)
end
-- the job is live again: it holds its unique key again, shared with any
-- newer live job that took it meanwhile
if st.unique_key ~= '' then
  unique_take(base, st.unique_key, id)
end
-- A workflow step with children: the dependents its failure cancelled come
-- back to Waiting, and theirs, down the graph, unless another failed
-- parent still cancels them (docs/CONTRACT.md, "Workflows").
if st.flow and string.sub(st.flow, 1, 1) == 'c' then
  local F = workflows()
  local stack = { { base, id } }
  while #stack > 0 do
    local top = table.remove(stack)
    for _, c in ipairs(F.refs(redis.call('HGET', top[1] .. 'children', top[2]), top[1])) do
      local cid, cb = c[1], c[2]
      local node = F.read_node(cb, cid)
      local cst = node and node.cancelled == '1' and read_state(cb, cid)
      if cst and cst.state == 'cancelled' and not F.first_failed(cb, cid, node) then
        redis.call('ZREM', done_key(cb, 'cancelled'), cid)
        F.count(cb, cst.flow, 'cancelled', 'waiting')
        cst.state, cst.finished_at = 'waiting', ''
        write_state(cb, cid, cst)
        redis.call('ZADD', cb .. 'waiting', '0', cid)
        node.cancelled = ''
        F.write_node(cb, cid, node)
        if string.sub(cst.flow, 1, 1) == 'c' then
          stack[#stack + 1] = { cb, cid }
        end
      end
    end
  end
end
redis.call('PUBLISH', ARGV[3], '1')
return 'ok'
