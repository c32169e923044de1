-- Releases the write hold: if the writer key is ours, the lock is free:
-- see `lib/writer_hand.lua`.
--
-- - `KEYS[1]`: the writer key, `KEYS[2..4]`: the fencing counter, the
--   queue and its waiters. `ARGV[1]`: owner token, `ARGV[2]`: the release
--   channel (`""`: none).
--
-- Replies: as `read_release.lua`'s.
--
-- Helpers: owned mint live_head publish give writer_hand delay
if not owned(KEYS[1], ARGV[1]) then return 0 end
if ARGV[3] == '1' then unmark(KEYS[5], KEYS[1]) end
local head, fence = hand_to_writer(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
if head then return {1, head, fence} end
return 1
