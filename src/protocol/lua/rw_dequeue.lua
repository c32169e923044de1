-- Leaves the queue of a read-write lock (a waiter that gave up). A writer
-- key handed over to it in the meantime is freed again (see
-- `lib/writer_hand.lua`); otherwise the writer key is announced, so that the
-- waiters it stood before look again.
--
-- - `KEYS[1]`: the writer key, `KEYS[2..4]`: the fencing counter, the
--   queue and its waiters. `ARGV[1]`: owner token, `ARGV[2]`: the release
--   channel (`""`: none).
--
-- Replies: 1 when a writer key handed over to it was freed, else 0.
--
-- Helpers: owned mint live_head publish give writer_hand
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if owned(KEYS[1], ARGV[1]) then
  hand_to_writer(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
  return 1
end
announce(ARGV[2], '-' .. KEYS[1])
return 0
