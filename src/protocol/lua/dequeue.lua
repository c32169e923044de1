-- Leaves the queue: a waiter that gave up. A lock (or permit) handed over
-- to it in the meantime is freed again (and handed to the next waiter).
--
-- - `KEYS[1]`: the fencing counter, `KEYS[2]`, `KEYS[3]`: the queue and
--   its waiters, `KEYS[4..]`: the lock keys (a semaphore's every permit).
--   `ARGV[1]`: owner token, `ARGV[2]`: the release channel (`""`: none).
--
-- Replies: how many keys handed over to it were freed.
--
-- Helpers: owned mint live_head publish give hand_over
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local n = 0
for i = 4, #KEYS do
  if owned(KEYS[i], ARGV[1]) then
    free(KEYS[i], KEYS[1], KEYS[2], KEYS[3], ARGV[2])
    n = n + 1
  end
end
return n
