-- Reads one hold for a listing: who holds its key, under which prefix, and
-- who waits for it there. Writes nothing.
--
-- - `KEYS[1]`: the hold's key (a lock's, a permit's, a read hold's or the
--   writer's); then, for each prefix it may be under (the longest first,
--   see `lib/whose.lua`), three keys: that prefix's fencing counter in the
--   key's slot, and the hold's queue and its waiters under it (those of
--   its lock, semaphore or read-write lock): the caller's own prefix and
--   those nested in it, its own last of them, then the outer ones and
--   none. `ARGV[1]`: the most waiters to read, `ARGV[2]`: the place of the
--   caller's own prefix.
--
-- Replies: an empty array when the key does not exist; otherwise
-- `[value, PTTL in ms, waiters, place]`, where the value is `""` for a
-- key of another type, `waiters` the metadata of each live waiter in queue
-- order (for a read-write lock led by `r` or `w`), never a waiter's token,
-- and `place` the prefix's place in the list: the longest whose counter
-- has reached the hold's fencing token (an outer one too: the hold is
-- said to be there), else the caller's own.
--
-- Helpers: mint live_head waiting whose
local v = redis.pcall('GET', KEYS[1])
if not v then return {} end
if type(v) ~= 'string' then v = '' end
local n = (#KEYS - 1) / 3
local at = whose(string.match(v, '^%x+:([1-9]%d*):'), 3, n)[1] or tonumber(ARGV[2])
local queued = waiting(KEYS[3 * at], KEYS[3 * at + 1], ARGV[1], clock())
return {v, redis.call('PTTL', KEYS[1]), queued, at}
