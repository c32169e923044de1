-- A guarded write: runs the caller's commands only while a guard holds
-- its lock. Checks first that every lock key of the guard holds its owner
-- token (and, for a read hold, that the hold is still counted among the
-- read holds, as its renewal checks); then runs the commands in order.
--
-- - `KEYS`: the guard's lock keys (`ARGV[2]` of them); for a read hold,
--   then the set of read holds; then, with a run id, the call's run marker;
--   then every key the commands name (declared for Cluster routing and
--   ACLs: the commands name them again in their own arguments).
--   `ARGV[1]`: owner token, `ARGV[2]`: how many lock keys, `ARGV[3]`: `r`
--   for a read hold, else empty; `ARGV[4]`: the marker's TTL in ms, or
--   empty for no marker; from `ARGV[5]` on, per command, its number of
--   arguments (its name included), then those.
--
-- The run marker makes the call run once however many times it is sent: a
-- Cluster connection of redis-rs sends a request again when its reply is
-- late. The first run sets it (with its TTL, past the resends); a resend
-- finds it and runs nothing.
--
-- Replies: `{0}` when a lock key was not ours (nothing ran); `{3}` when
-- the marker was set (an earlier send of this call ran, nothing ran now);
-- otherwise as `run` of lib/run.lua: `{1, reply, ...}`, or `{2, i, error}`
-- when command `i` failed (the ones before it ran, the ones after it did
-- not).
--
-- Helpers: owned run
local n = tonumber(ARGV[2])
local at = n + 1
if ARGV[3] == 'r' then at = n + 2 end
local marker = ARGV[4] ~= '' and KEYS[at]
if marker and redis.call('EXISTS', marker) == 1 then return {3} end
for i = 1, n do
  if not owned(KEYS[i], ARGV[1]) then return {0} end
end
if ARGV[3] == 'r' and redis.call('SISMEMBER', KEYS[n + 1], KEYS[1]) == 0 then
  return {0}
end
if marker then redis.call('SET', marker, '1', 'PX', ARGV[4]) end
return run(5)
