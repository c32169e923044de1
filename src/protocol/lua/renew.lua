-- Sets the TTL of every lock key, only if all of them are ours; in
-- Redlock mode, puts back the ones that are missing (an instance that lost
-- its data) with our value, and raises the counter to our fencing token.
--
-- - `KEYS`: the lock keys; in Redlock mode, then the fencing counter; last,
--   the marks of broken holds (see `lib/marks.lua`).
--   `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms; in Redlock mode,
--   `ARGV[3]`: the lock's value (`<token>:<fence>:<metadata>`), `ARGV[4]`:
--   its fencing token.
--
-- Replies: 1 when all were ours (or put back) and got the TTL; 0 when any
-- was someone else's (or, outside Redlock mode, missing), in which case
-- none was touched; instead of 0, the reason an operator gave when the
-- hold was broken (`break.lua`): then a missing key is not put back.
--
-- Helpers: owned marks
local value = ARGV[3]
local marks = KEYS[#KEYS]
local n = #KEYS - 1
if value then n = n - 1 end
for i = 1, n do
  local v = redis.pcall('GET', KEYS[i])
  if not ours(v, ARGV[1]) then
    -- A key missing here is put back, unless an operator broke the hold.
    local why = lost(marks, ARGV[1])
    if not (value and v == false) or why ~= 0 then return why end
  end
end
for i = 1, n do
  if redis.call('PEXPIRE', KEYS[i], ARGV[2]) == 0 then
    redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
  end
end
if value and tonumber(redis.call('GET', KEYS[n + 1]) or '0') < tonumber(ARGV[4]) then
  redis.call('SET', KEYS[n + 1], ARGV[4])
end
return 1
