-- Redlock: raises a counter to at least a floor after a grant, so the next
-- grant on this instance mints a larger token, records the floor as the
-- fencing token of the lock keys that are ours (keeping their TTL), and
-- takes the lock keys that are missing here (with the TTL): a grant on a
-- bare majority then holds every instance that is free, so one instance
-- that loses its data cannot hand a rival a majority.
--
-- - `KEYS[1]`: the fencing counter; `KEYS[2..]`: the lock keys.
-- - `ARGV[1]`: the floor (the largest token of the grant), `ARGV[2]`: owner
--   token, `ARGV[3]`: metadata, `ARGV[4]`: the TTL in ms.
--
-- Replies: 1 when every lock key is ours here afterwards, 0 when one is
-- someone else's (a rival's attempt holds it for a moment).
--
-- Helpers: owned
local floor = ARGV[1]
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(floor) then
  redis.call('SET', KEYS[1], floor)
end
local value = ARGV[2] .. ':' .. floor .. ':' .. ARGV[3]
local all = 1
for i = 2, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if ours(v, ARGV[2]) then
    redis.call('SET', KEYS[i], value, 'KEEPTTL')
  elseif v == false then
    redis.call('SET', KEYS[i], value, 'PX', ARGV[4])
  else
    all = 0
  end
end
return all
