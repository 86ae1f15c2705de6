-- common/rotation.lua: keyed jobs' rotations, `rotations()` (the library's
-- fourth part, after workflows.lua): one queue's keyed Pending jobs walked
-- from its cursors under the key limits, for claim.lua and peek.lua.

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
    r.singles = true
    return true
  end

  -- After a short claim that left keyed Pending jobs in rotation `r`'s
  -- queue: what held them back, from the keys its walk met (claim.lua's
  -- "limited"): "c" when one of them is at its concurrency (always, after
  -- take_singles: a default of one Running job), else the earliest
  -- instant (microseconds) a full rate window of one of them has room
  -- again; nil when none is held. A key met whose jobs are all taken may
  -- answer for one still held (a concurrency for a rate): the pool then
  -- polls sooner than it needs to.
  function K.held(r)
    if r.singles then return 'c' end
    local until_
    for key, lim in pairs(r.limits) do
      if lim[1] and r.run[key] >= lim[1] then return 'c' end
      local n = r.started[key]
      if lim[2] and lim[3] and n and n >= lim[2] then
        local first = redis.call('ZRANGE', r.base .. 'kstarts:' .. key, '0', '0', 'WITHSCORES')[2]
        local u = (tonumber(first) or r.now) + lim[3]
        if not until_ or u < until_ then until_ = u end
      end
    end
    return until_
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
