-- Reads one hold for a listing: who holds its key, and who waits for it.
-- Writes nothing.
--
-- - `KEYS[1]`: the hold's key (a lock's, a permit's, a read hold's or the
--   writer's), `KEYS[2]`, `KEYS[3]`: the queue and its waiters (those of
--   its lock, semaphore or read-write lock). `ARGV[1]`: the most waiters
--   to read.
--
-- Replies: an empty array when the key does not exist; otherwise
-- `[value, PTTL in ms, waiters]`, where the value is `""` for a key of
-- another type, and `waiters` the metadata of each live waiter in queue
-- order (for a read-write lock led by `r` or `w`), never a waiter's token.
--
-- Helpers: mint live_head waiting
local v = redis.pcall('GET', KEYS[1])
if not v then return {} end
if type(v) ~= 'string' then v = '' end
local queued = waiting(KEYS[2], KEYS[3], ARGV[1], clock())
return {v, redis.call('PTTL', KEYS[1]), queued}
