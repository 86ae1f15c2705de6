-- common/moves.lua: moves between states the scripts share (the library's
-- fifth part, after rotation.lua): requeue, the unique keys' holders
-- (unique_holder is in core.lua), make_terminal, errors, keyed jobs leaving
-- Running in bulk, a corrupt job's burial and a due job's promotion.

-- Pending when due (delay zero), else Scheduled; returns the new state.
local function requeue(base, id, st, priority, now, delay)
  if delay <= 0 then
    make_pending(base, id, st, priority, now)
    return 'pending'
  end
  make_scheduled(base, id, st, now + delay)
  return 'scheduled'
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

-- ZREM of many members (call_chunked: core.lua).
local function zrem_chunked(key, members)
  call_chunked('ZREM', key, members)
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
