-- Breaks a hold for an operator, as its holder's release would free it:
-- marks the holder's token as broken with the reason (read by its next
-- renewal, see `lib/marks.lua`), keeps the fencing counter at or above the
-- broken token, and frees the key: a lock or a permit is handed to its
-- first live waiter (`lib/hand_over.lua`), the writer key to a writer
-- (`lib/writer_hand.lua`); a read hold leaves the set of read holds, and
-- the last one frees the writer key as `read_release.lua` does. Nothing
-- else is touched; a key that is missing, or was not written by redmutex,
-- is left as it is.
--
-- - `KEYS[1]`: the hold's key, `KEYS[2]`: the fencing counter, `KEYS[3]`,
--   `KEYS[4]`: the queue and its waiters, `KEYS[5]`: the marks; for a
--   read-write lock, `KEYS[6]`: the writer key, `KEYS[7]`: the set of read
--   holds; for a read hold, `KEYS[8]`: the lock-delay marks (see
--   `lib/delay.lua`): while another hold's delay lasts (a reader that
--   vanished), the writer key is freed and announced, not handed over.
--   `ARGV[1]`: the reason, `ARGV[2]`: the release channel (`""`: none),
--   `ARGV[3]`: `lock` (a lock or a permit), `read` or `write`,
--   `ARGV[4]`: how long a mark outlives the broken key's TTL, in ms.
--
-- Replies: an empty array when the key does not exist; `["", PTTL]` for a
-- key redmutex did not write (left alone: not `<32 hex digits>:<fencing
-- token below 2^63>:...`); otherwise `[value, PTTL]` as the
-- key was, and after a hand-over the grantee's owner token and fencing
-- token too.
--
-- Helpers: mint live_head readers publish give hand_over writer_hand
local v = redis.pcall('GET', KEYS[1])
if not v then return {} end
local pttl = redis.call('PTTL', KEYS[1])
local token, fence = string.match(type(v) == 'string' and v or '', '^(%x+):([1-9]%d*):')
-- Ours only with a 32-digit owner token and a fencing token the counter can
-- take (INCR works up to 2^63 - 1): an application's value that merely
-- looks alike is left alone, and never raises the counter.
local fits = fence and (#fence < 19 or (#fence == 19 and fence <= '9223372036854775807'))
if not token or #token ~= 32 or not fits then return {'', pttl} end
-- The mark, kept while the holder may still renew, and the stale ones dropped.
local now = clock()
local marks = redis.call('HGETALL', KEYS[5])
for i = 1, #marks, 2 do
  if tonumber(string.match(marks[i + 1], '^(%d+):') or '0') < now then
    redis.call('HDEL', KEYS[5], marks[i])
  end
end
local life = math.max(pttl, 0) + tonumber(ARGV[4])
redis.call('HSET', KEYS[5], token, string.format('%.0f', now + life) .. ':' .. ARGV[1])
if redis.call('PTTL', KEYS[5]) < life then redis.call('PEXPIRE', KEYS[5], life) end
-- Every later grant's token above the broken one, even if the counter was lost.
local last = redis.call('GET', KEYS[2])
if not last or above(fence, last) then redis.call('SET', KEYS[2], fence) end
local head, handed
if ARGV[3] == 'read' then
  redis.call('SREM', KEYS[7], KEYS[1])
  redis.call('DEL', KEYS[1])
  if live_readers(KEYS[7]) == 0 and redis.call('EXISTS', KEYS[6]) == 0 then
    -- Another hold's lock-delay (not the broken one's: a break frees as
    -- its release would) keeps the writer out until it ends.
    local delays = KEYS[8] and redis.call('HGETALL', KEYS[8]) or {}
    local delayed = false
    for i = 1, #delays, 2 do
      if delays[i] ~= KEYS[1] and (tonumber(delays[i + 1]) or 0) > now then
        delayed = true
      end
    end
    if delayed then
      drop_free(KEYS[6], ARGV[2])
    else
      head, handed = hand_to_writer(KEYS[6], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
    end
  end
elseif ARGV[3] == 'write' then
  head, handed = hand_to_writer(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
else
  head, handed = free(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
end
if head then return {v, pttl, head, handed} end
return {v, pttl}
