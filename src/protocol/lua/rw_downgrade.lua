-- Turns the write hold of a read-write lock into a read hold, in one step:
-- if the writer key is ours, a read hold is granted (a fresh fencing
-- token, its key put in the set of read holds) and the writer key is
-- deleted, so that no writer or reader can come in between. Nobody is
-- handed anything: a writer queued stays queued (it waits for the read
-- holds, this one included, as it would for any), and readers queued
-- behind it stay behind it; the freed writer key is announced
-- (`-<writer key>`), which wakes the waiters, so that every reader queued
-- before the first writer comes in at once, as after a writer's release.
--
-- - `KEYS[1]`: the writer key, `KEYS[2]`: the new read hold's key,
--   `KEYS[3]`: the set of read holds, `KEYS[4]`: the fencing counter,
--   `KEYS[5]`: the queue, `KEYS[6]`: the lock-delay marks (see
--   `lib/delay.lua`), `KEYS[7]`: the marks of broken holds (see
--   `lib/marks.lua`).
-- - `ARGV[1]`: the write hold's owner token, `ARGV[2]`: the read hold's
--   owner token, `ARGV[3]`: its TTL in ms, `ARGV[4]`: the release channel
--   (`''`: none), `ARGV[5]`: the holder's lock-delay in ms (`0`: none;
--   else the writer's mark goes, as at a clean release, and the read hold
--   gets its own). The read hold carries the write hold's metadata.
--
-- Replies: the read hold's fencing token when the writer key was ours; 0
-- when it was not (nothing is changed), or instead of 0 the reason an
-- operator gave when the hold was broken (`break.lua`).
--
-- Helpers: owned mint readers publish delay marks
local v = redis.pcall('GET', KEYS[1])
if not ours(v, ARGV[1]) then return lost(KEYS[7], ARGV[1]) end
local metadata = string.match(v, '^[^:]*:[^:]*:(.*)$') or ''
local fence = mint(KEYS[4])
redis.call('SET', KEYS[2], ARGV[2] .. ':' .. fence .. ':' .. metadata, 'PX', ARGV[3])
redis.call('SADD', KEYS[3], KEYS[2])
keep(KEYS[3], ARGV[3])
redis.call('DEL', KEYS[1])
local delay = tonumber(ARGV[5])
if delay > 0 then
  unmark(KEYS[6], KEYS[1])
  mark(KEYS[6], KEYS[2], clock(), ARGV[3], delay)
end
if redis.call('EXISTS', KEYS[5]) == 1 then announce(ARGV[4], '-' .. KEYS[1]) end
return {fence}
