-- A guarded write: runs the caller's commands only while a guard holds
-- its lock. Checks first that every lock key of the guard holds its owner
-- token (and, for a read hold, that the hold is still counted among the
-- read holds, as its renewal checks); then runs the commands in order.
--
-- - `KEYS`: the guard's lock keys (`ARGV[2]` of them); for a read hold,
--   then the set of read holds; then every key the commands name (declared
--   for Cluster routing and ACLs: the commands name them again in their own
--   arguments). `ARGV[1]`: owner token, `ARGV[2]`: how many lock keys,
--   `ARGV[3]`: `r` for a read hold, else empty; from `ARGV[4]` on, per
--   command, its number of arguments (its name included), then those.
--
-- Replies: `{0}` when a lock key was not ours (nothing ran); otherwise as
-- `run` of lib/run.lua: `{1, reply, ...}`, or `{2, i, error}` when command
-- `i` failed (the ones before it ran, the ones after it did not).
--
-- Helpers: owned run
local n = tonumber(ARGV[2])
for i = 1, n do
  if not owned(KEYS[i], ARGV[1]) then return {0} end
end
if ARGV[3] == 'r' and redis.call('SISMEMBER', KEYS[n + 1], KEYS[1]) == 0 then
  return {0}
end
return run(4)
