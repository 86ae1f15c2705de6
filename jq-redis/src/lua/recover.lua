-- recover.lua: hands back up to `batch` jobs of one queue whose lease
-- expired: Pending (run_at now) with attempts left, else Dead, with a
-- "lease expired" error for the lost attempt; Cancelled, with no error,
-- when it holds a cancel request.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  now (microseconds)
-- ARGV[2]  batch size (the caller calls again while a full batch was seen)
-- ARGV[3]  wake-up channel (PUBLISHed when a job became Pending)
-- Returns { jobs recovered, lease entries examined, reasons }: reasons
-- lists, for each job that went to Dead because its fields are corrupt,
-- why (the caller logs them).
--
-- A workflow step made Dead or Cancelled releases or cancels its
-- dependents in this same script (make_terminal, common/moves.lua).
--
-- The guard (state Running and lease_expires_at <= now) is checked in the
-- same script as the write, so a job a concurrent ack just finished is never
-- touched.
--
-- Every field this script computes with is checked before the first write
-- to its job (see int() in common/base.lua): a corrupt job goes to Dead with the
-- reason; it must not stop the others, nor stay in the lease index forever.

local base = KEYS[1]
local now = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', base .. 'leases', '-inf', ARGV[1], 'LIMIT', '0', ARGV[2])
local moved = 0
local woke = false
local has_extra = #expired > 0 and redis.call('EXISTS', base .. 'extra') == 1
local reasons = {}
for _, id in ipairs(expired) do
  local st = read_state(base, id)
  if not st or st.state ~= 'running' then
    -- a stale index entry: the job is no longer Running
    redis.call('ZREM', base .. 'leases', id)
  else
    local b = read_body(base, id)
    local expires, attempts, max_attempts, priority = int(st.lease_expires_at), int(st.attempts), int(b.max_attempts),
      int(b.priority)
    local why
    if not expires then
      why = unusable('lease_expires_at', st.lease_expires_at)
    elseif not attempts then
      why = unusable('attempts', st.attempts)
    elseif not max_attempts then
      why = unusable('max_attempts', b.max_attempts)
    elseif not priority then
      why = unusable('priority', b.priority)
    end
    if why then
      -- The index says the lease expired; the state cannot say otherwise.
      local reason = 'job ' .. id .. ' is corrupt in storage: ' .. why .. ' (found when its lease expired)'
      redis.call('ZREM', base .. 'leases', id)
      bury_corrupt(base, id, st, attempts, now, reason)
      reasons[#reasons + 1] = reason
      moved = moved + 1
    elseif expires <= now then
      redis.call('ZREM', base .. 'leases', id)
      local worker = st.lease_worker
      if worker == '' then worker = '?' end
      if has_extra and read_extra(base, id).cancel_at ~= '' then
        -- its worker died (or was cut off) while cancelling: the cancel
        -- wins over another attempt, and is no failure
        make_terminal(base, id, st, 'cancelled', now)
      else
      append_error(base, id, attempts, now,
        'lease expired (worker ' .. worker .. ' did not finish or heartbeat in time)')
      if attempts >= max_attempts then
        make_terminal(base, id, st, 'dead', now)
      else
        make_pending(base, id, st, priority, now)
        woke = true
      end
      end
      moved = moved + 1
    else
      -- the index was behind the state (cannot happen through jq); repair it
      redis.call('ZADD', base .. 'leases', fmt(expires), id)
    end
  end
end
if woke or (flow_lib and flow_lib.woke) then
  redis.call('PUBLISH', ARGV[3], '1')
end
return { moved, #expired, reasons }
