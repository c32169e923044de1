-- Redlock: raises a counter to at least a floor after a grant, so the next
-- grant on this instance mints a larger token, records the floor as the
-- fencing token of the lock keys that are ours (keeping their TTL), and
-- takes the lock keys that are missing here (with the TTL): a grant on a
-- bare majority then holds every instance that is free, so one instance
-- that loses its data cannot hand a rival a majority.
--
-- - `KEYS[1]`: the fencing counter; `KEYS[2..1+m]`: the m lock keys;
--   `KEYS[2+m..1+2m]`: the lock-delay marks of each.
-- - `ARGV[1]`: the floor (the largest token of the grant), `ARGV[2]`: owner
--   token, `ARGV[3]`: metadata, `ARGV[4]`: the TTL in ms; `ARGV[5]`
--   (optional): this holder's lock-delay in ms, recorded with the keys.
--
-- A missing key whose lock-delay lasts here is left missing (see
-- `lib/delay.lua`): the grant stands on the others.
--
-- Replies: 1 when every lock key is ours here afterwards, 0 when one is
-- someone else's (a rival's attempt holds it for a moment).
--
-- Helpers: owned mint delay
local floor = ARGV[1]
local delay = tonumber(ARGV[5] or '0')
local last = 1 + (#KEYS - 1) / 2
-- The lock-delay marks of lock key `i`.
local function marks(i) return KEYS[i + last - 1] end
local now = clock()
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(floor) then
  redis.call('SET', KEYS[1], floor)
end
local value = ARGV[2] .. ':' .. floor .. ':' .. ARGV[3]
local all = 1
for i = 2, last do
  local v = redis.pcall('GET', KEYS[i])
  if ours(v, ARGV[2]) then
    redis.call('SET', KEYS[i], value, 'KEEPTTL')
    if delay > 0 then mark(marks(i), KEYS[i], now, redis.call('PTTL', KEYS[i]), delay) end
  elseif v == false then
    if not delayed(marks(i), KEYS[i], now) then
      redis.call('SET', KEYS[i], value, 'PX', ARGV[4])
      if delay > 0 then mark(marks(i), KEYS[i], now, ARGV[4], delay) end
    end
  else
    all = 0
  end
end
return all
