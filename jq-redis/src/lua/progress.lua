-- progress.lua: stores the progress of Running jobs (CancelStorage::progress).
--
-- KEYS[q]  base of each queue the batch touches
-- then 4 values per item: queue index (1-based into KEYS), id (32 hex),
-- token, value (checked JSON text)
-- Returns the ids whose lease was lost (nothing stored for them).

local lost = {}
local n = #ARGV / 4
for j = 0, n - 1 do
  local a = j * 4
  local base, id, token = KEYS[tonumber(ARGV[a + 1])], ARGV[a + 2], ARGV[a + 3]
  local st = read_state(base, id)
  if not st or st.state ~= 'running' or st.lease_token ~= token then
    lost[#lost + 1] = id
  else
    local x = read_extra(base, id)
    x.progress = ARGV[a + 4]
    write_extra(base, id, x)
  end
end
return lost
