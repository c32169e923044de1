-- Sets the value of an election's leader, only if the election key is
-- ours, keeping its TTL and term, and logs the change.
--
-- - `KEYS[1]`: the election key, `KEYS[2]`: the log (see `lib/log.lua`).
-- - `ARGV[1]`: owner token, `ARGV[2]`: the new value, `ARGV[3]`: the
--   log's cap in entries, `ARGV[4]`: how long the log is kept after this
--   change, in ms.
--
-- Replies: 1 when the key was ours and now carries the value; 0 when not
-- (nothing is changed or logged).
--
-- Helpers: owned log
local v = redis.pcall('GET', KEYS[1])
if not ours(v, ARGV[1]) then return 0 end
local term = leader_of(v)
if not term then return 0 end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. term .. ':' .. ARGV[2], 'KEEPTTL')
record(KEYS[2], term, ARGV[2], ARGV[3], ARGV[4])
return 1
