-- Sets the TTL of every lock key, only if all of them are ours; in
-- Redlock mode, puts back the ones that are missing (an instance that lost
-- its data) with our value, and raises the counter to our fencing token.
-- With a lock-delay, records the lease's new end (see `lib/delay.lua`).
--
-- - `KEYS`: the n lock keys; in Redlock mode, then the fencing counter;
--   with a lock-delay, then the lock-delay marks of each lock key (n more);
--   last, the marks of broken holds (see `lib/marks.lua`).
--   `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms, `ARGV[3]`: the
--   lock-delay in ms (`0`: none); in Redlock mode, `ARGV[4]`: the lock's
--   value (`<token>:<fence>:<metadata>`), `ARGV[5]`: its fencing token.
--
-- Replies: 1 when all were ours (or put back) and got the TTL; 0 when any
-- was someone else's (or, outside Redlock mode, missing), in which case
-- none was touched; instead of 0, the reason an operator gave when the
-- hold was broken (`break.lua`): then a missing key is not put back.
--
-- Helpers: owned
-- The common case first, before the helpers of the others are defined:
-- one key (and the broken holds' marks), no lock-delay, not Redlock, ours.
if #KEYS == 2 and ARGV[3] == '0' and not ARGV[4] and owned(KEYS[1], ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
-- Helpers here: mint delay marks
local value = ARGV[4]
local delay = tonumber(ARGV[3] or '0')
local broken = KEYS[#KEYS]
local n = #KEYS - 1
local counter = nil
if value then n = n - 1 end
if delay > 0 then n = n / 2 end
if value then counter = KEYS[n + 1] end
-- The lock-delay marks of lock key `i` (with a delay).
local function delays(i) return KEYS[#KEYS - 1 - n + i] end
for i = 1, n do
  local v = redis.pcall('GET', KEYS[i])
  if not ours(v, ARGV[1]) then
    -- A key missing here is put back, unless an operator broke the hold.
    local why = lost(broken, ARGV[1])
    if not (value and v == false) or why ~= 0 then return why end
  end
end
local now = delay > 0 and clock()
for i = 1, n do
  if redis.call('PEXPIRE', KEYS[i], ARGV[2]) == 0 then
    redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
  end
  if now then mark(delays(i), KEYS[i], now, ARGV[2], delay) end
end
if value and tonumber(redis.call('GET', counter) or '0') < tonumber(ARGV[5]) then
  redis.call('SET', counter, ARGV[5])
end
return 1
