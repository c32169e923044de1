-- Releases a read hold: deletes its key if it is ours and takes it out of
-- the set of read holds; when no live read hold is left, the lock is free:
-- see `lib/writer_hand.lua`.
--
-- - `KEYS[1]`: the read hold's key, `KEYS[2]`: the set of read holds,
--   `KEYS[3]`: the writer key, `KEYS[4..6]`: the fencing counter, the queue
--   and its waiters. `ARGV[1]`: owner token, `ARGV[2]`: the release channel
--   (`""`: none); `KEYS[7]`: the lock-delay marks (see `lib/delay.lua`),
--   `ARGV[3]`: `1` when the hold's mark is deleted if it was ours (a
--   holder with a lock-delay), else empty. While another hold's lock-delay
--   lasts (a reader that vanished), the writer key is freed and announced,
--   not handed over: a writer comes back and is told how long to wait.
--
-- Replies: 1 when the hold was ours and still counted among the read
-- holds, 0 when it had been lost: its key gone or another's, or left out
-- of the set (a set evicted while the hold's key stayed), since writers no
-- longer saw it (as `read_renew.lua` says); after a hand-over, an array of
-- that number, the grantee's owner token and its fencing token (as
-- `release.lua`'s).
--
-- Helpers: owned mint live_head readers publish give writer_hand delay
local n = 0
local counted = redis.call('SREM', KEYS[2], KEYS[1]) == 1
if owned(KEYS[1], ARGV[1]) then
  redis.call('DEL', KEYS[1])
  if ARGV[3] == '1' then unmark(KEYS[7], KEYS[1]) end
  if counted then n = 1 end
end
if live_readers(KEYS[2]) == 0 and redis.call('EXISTS', KEYS[3]) == 0 then
  if latest(KEYS[7], clock()) then
    drop_free(KEYS[3], ARGV[2])
    return n
  end
  local head, fence = hand_to_writer(KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[2])
  if head then return {n, head, fence} end
end
return n
