-- Resigns an election's leadership: deletes the election key if it is
-- ours and hands it to the first live candidate queued (as `release.lua`
-- does a lock's), then logs what follows: a hand-over (the candidate
-- logs itself as leader when it takes the lead up; the entry names it by
-- the SHA-1 of its token, and says when its claim runs out), or no leader.
--
-- - `KEYS[1]`: the election key, `KEYS[2]`: the fencing counter,
--   `KEYS[3]`, `KEYS[4]`: the candidates' queue and their entries,
--   `KEYS[5]`: the log (see `lib/log.lua`); `KEYS[6]` (with `ARGV[5]`):
--   the election key's lock-delay marks (see `lib/delay.lua`).
-- - `ARGV[1]`: owner token, `ARGV[2]`: the release channel (`''`: none,
--   and no hand-over), `ARGV[3]`: the log's cap in entries, `ARGV[4]`:
--   how long the log is kept after this change, in ms; `ARGV[5]`
--   (optional): `1` when the leader has a lock-delay, whose mark is
--   deleted (a resignation is a clean release).
--
-- Replies: 0 when the key was not ours (nothing is changed or logged);
-- 1 when it was, and was freed; after a hand-over, an array of 1, the
-- grantee's owner token and its fencing token.
--
-- Helpers: owned mint live_head publish give hand_over log delay
local v = redis.pcall('GET', KEYS[1])
if not ours(v, ARGV[1]) then return 0 end
if ARGV[5] == '1' then unmark(KEYS[6], KEYS[1]) end
local head, fence = free(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
ended(KEYS[5], KEYS[1], v, head, head and clock(), ARGV[3], ARGV[4])
if head then return {1, head, fence} end
return 1
