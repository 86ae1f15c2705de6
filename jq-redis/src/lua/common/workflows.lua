-- common/workflows.lua: the workflow helpers, `workflows()` (the library's
-- third part, after base.lua, which declares `workflows` and `flow_lib`):
-- a step's summary counts, the refs of a stored workflow, and the release
-- or cancellation of a finished step's children.

-- The workflow helpers (see `workflows` in base.lua), built on first use.
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
  -- move and six commands per release. Counts
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
