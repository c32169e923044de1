-- One step of a walk over the keys of the server that runs it: on a
-- Cluster, the master that owns `KEYS[1]`'s slot, which only routes the
-- call there and is not read. Writes nothing.
--
-- - `KEYS[1]`: a key in a slot of the master to walk.
--   `ARGV[1]`: the cursor, `ARGV[2]`: the pattern, `ARGV[3]`: the COUNT,
--   `ARGV[4]`: `1` to keep only the keys whose value is a hold's
--   (`<32 hex digits>:<fence>:...`, its first 64 bytes read here), so that the caller need not ask
--   for every other string key the walk finds; anything else keeps them
--   all (a Cluster, where a script may not read keys it did not declare
--   in other slots). `ARGV[5]`: the type of the keys to keep, `string`
--   (the holds, counters, marks) or `stream` (the audit trails).
--
-- Replies: SCAN's reply, the next cursor and the keys of that type in this
-- step.
--
-- Helpers: (none)
local step = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3], 'TYPE', ARGV[5])
if ARGV[4] ~= '1' then return step end
local holds = {}
-- A hold's value: a 32-digit owner token, then its fencing token.
local ours = '^' .. string.rep('%x', 32) .. ':%d+:'
for _, k in ipairs(step[2]) do
  local v = redis.pcall('GETRANGE', k, 0, 63)
  if type(v) == 'string' and string.match(v, ours) then holds[#holds + 1] = k end
end
return {step[1], holds}
