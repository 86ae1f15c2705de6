-- list.lua: one page of a queue's jobs by ascending id, filtered.
--
-- KEYS[1]  base of the queue
-- ARGV[1]  after: list ids greater than this (32 hex), "" from the start
-- ARGV[2]  limit: at most this many jobs
-- ARGV[3]  state filter ("" = any)
-- ARGV[4]  kind filter ("" = any)
-- ARGV[5]  scan budget: at most this many ids are examined per call
-- Returns { jobs (job_fields arrays), cursor }: cursor is "" when the queue
-- was exhausted, else the last id examined (call again after it).

local base = KEYS[1]
local after, limit, state, kind = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local budget = tonumber(ARGV[5])
local from = '-'
if after ~= '' then from = '(' .. after end
local out = {}
local scanned = 0
local last = ''
while #out < limit and scanned < budget do
  local chunk = math.min(500, budget - scanned)
  local ids = redis.call('ZRANGEBYLEX', base .. 'ids', from, '+', 'LIMIT', 0, chunk)
  for _, id in ipairs(ids) do
    scanned = scanned + 1
    last = id
    local st = redis.call('HGET', base .. 'states', id)
    if st and (state == '' or string.match(st, '^%Z*') == state)
      and (kind == '' or string.match(redis.call('HGET', base .. 'jobs', id) or '', '^%Z*') == kind) then
      out[#out + 1] = job_fields(base, id)
      if #out >= limit then return { out, last } end
    end
  end
  if #ids < chunk then return { out, '' } end
  from = '(' .. last
end
return { out, last }
