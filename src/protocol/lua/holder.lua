-- Reads who holds one lock key.
--
-- - `KEYS[1]`: the lock key.
--
-- Replies: an empty array when the key does not exist; otherwise
-- `[value, PTTL in ms]`, where the value is `""` for a key of another type.
--
-- Helpers: (none)
local v = redis.pcall('GET', KEYS[1])
if not v then return {} end
if type(v) ~= 'string' then v = '' end
return {v, redis.call('PTTL', KEYS[1])}
