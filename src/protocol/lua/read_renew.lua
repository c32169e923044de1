-- Renews a read hold: sets its TTL if it is ours and still counted among
-- the read holds (a set that was lost, evicted say, no longer keeps
-- writers out: the hold is lost), and keeps that set alive as long.
--
-- - `KEYS[1]`: the read hold's key, `KEYS[2]`: the set of read holds,
--   `KEYS[3]`: the marks of broken holds (see `lib/marks.lua`).
--   `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms. With a lock-delay,
--   `KEYS[4]`: its marks, `ARGV[3]`: the delay in ms (see `lib/delay.lua`).
--
-- Replies: 1 when renewed, 0 when lost (nothing touched), or instead of 0
-- the reason an operator gave when the hold was broken (`break.lua`).
--
-- Helpers: owned readers mint delay marks
if not owned(KEYS[1], ARGV[1]) or redis.call('SISMEMBER', KEYS[2], KEYS[1]) == 0 then
  return lost(KEYS[3], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
keep(KEYS[2], ARGV[2])
if KEYS[4] then mark(KEYS[4], KEYS[1], clock(), ARGV[2], tonumber(ARGV[3])) end
return 1
