-- Breaks a hold for an operator, as its holder's release would free it:
-- marks the holder's token as broken with the reason (read by its next
-- renewal, see `lib/marks.lua`), keeps the fencing counter at or above the
-- broken token, and frees the key: a lock or a permit is handed to its
-- first live waiter (`lib/hand_over.lua`), the writer key to a writer
-- (`lib/writer_hand.lua`); a read hold leaves the set of read holds, and
-- the last one frees the writer key as `read_release.lua` does. The broken
-- hold's lock-delay mark goes, as with a clean release: a break frees the
-- hold at once for everyone, queued or not (the operator's override; the
-- broken holder's late writes are for fencing tokens to refuse). Nothing
-- else is touched; a key that is missing, or was not written by redmutex,
-- is left as it is. An election's leader is freed as a lock is, and its
-- log told what follows, as a resignation tells it (`lib/log.lua`): the
-- candidate it is handed to, or no leader.
--
-- The hold is broken under its own prefix (`lib/whose.lua`): of the
-- prefixes the caller names, the longest whose counter has reached the
-- hold's token (the one named, when the caller knows it is the one it can
-- be under). Its holder's mark and the end of its lock-delay go to every
-- prefix whose counter has reached the token, so that its holder is told
-- whichever of them it is under; the rest (counter, queue, hand-over,
-- announcement) is that prefix's. When none has reached the token and the
-- caller does not know it, nothing says which marks its holder reads: the
-- hold is left as it is. The caller breaks holds of the first prefixes it
-- names only (its own and those nested in it), and names the outer ones
-- too: when the longest whose counter has reached the token is one of
-- those, the hold is that prefix's, and left as it is.
--
-- - `KEYS[1]`: the hold's key; then, for each of the `n` prefixes it may
--   be under (the longest first), five keys: that prefix's fencing counter
--   and marks (in the key's slot), the hold's queue, its waiters and its
--   lock-delay marks there (see `lib/delay.lua`); then, for a read-write
--   lock, `KEYS[2 + 5n]`: the writer key, `KEYS[3 + 5n]`: the set of read
--   holds; for a leader, `KEYS[2 + 5n]`: the election's log. For a read
--   hold, while another hold's delay lasts (a reader that vanished), the
--   writer key is freed and announced, not handed over.
--   `ARGV[1]`: the reason, `ARGV[2]`: `lock` (a lock or a permit), `read`,
--   `write` or `leader`, `ARGV[3]`: how long a mark outlives the broken
--   key's TTL, in ms, `ARGV[4]`: the most waiters to read, `ARGV[5]`: `n`,
--   `ARGV[6]`: `1` when the one prefix named is the one it can be under
--   (an internal key's, or none for a lock key no prefix can hold),
--   `ARGV[7]`: how many of the prefixes (the first ones) it may be broken
--   under, `ARGV[8..7+n]`: the release channel of each prefix (`""`:
--   none); for a leader, `ARGV[8+n]`: the log's cap in entries,
--   `ARGV[9+n]`: how long it is kept after this change, in ms.
--
-- Replies: an empty array when the key does not exist; `["", PTTL]` for a
-- key redmutex did not write (left alone: not `<32 hex digits>:<fencing
-- token below 2^63>:...`, or without an expiry); `[value, PTTL, [], 0]`
-- for a hold whose prefix nothing tells (left alone); `[value, PTTL, [],
-- -place]` for a hold of a prefix past those it may be broken under (left
-- alone); otherwise `[value,
-- PTTL, waiters, place]` as the key was, with its live waiters as a
-- listing shows them (`lib/waiting.lua`: the first of them is the one it
-- may be handed to) and the place of the prefix it was broken under, and
-- after a hand-over the grantee's owner token and fencing token too.
--
-- Helpers: mint live_head waiting readers publish give hand_over writer_hand delay log whose
local v = redis.pcall('GET', KEYS[1])
if not v then return {} end
local pttl = redis.call('PTTL', KEYS[1])
local token, fence = string.match(type(v) == 'string' and v or '', '^(%x+):([1-9]%d*):')
-- Ours only with a 32-digit owner token and a fencing token the counter can
-- take (INCR works up to 2^63 - 1): an application's value that merely
-- looks alike is left alone, and never raises the counter.
local fits = fence and (#fence < 19 or (#fence == 19 and fence <= '9223372036854775807'))
-- And with an expiry: redmutex writes none without one.
if not token or #token ~= 32 or not fits or pttl < 0 then return {'', pttl} end
local n = tonumber(ARGV[5])
-- Key `j` of the prefix at place `i`: 1 its counter, 2 its marks, 3 the
-- queue, 4 its waiters, 5 the lock-delay marks.
local function of(i, j) return KEYS[1 + 5 * (i - 1) + j] end
local told = whose(fence, 5, n)
local at = told[1]
if ARGV[6] == '1' then
  at, told = 1, {1}
elseif not at then
  return {v, pttl, {}, 0}
elseif at > tonumber(ARGV[7]) then
  return {v, pttl, {}, -at}
end
local now = clock()
local queued = waiting(of(at, 3), of(at, 4), ARGV[4], now)
local life = math.max(pttl, 0) + tonumber(ARGV[3])
for _, i in ipairs(told) do
  -- The mark, kept while the holder may still renew, and the stale ones dropped.
  local marks = of(i, 2)
  local all = redis.call('HGETALL', marks)
  for m = 1, #all, 2 do
    if tonumber(string.match(all[m + 1], '^(%d+):') or '0') < now then
      redis.call('HDEL', marks, all[m])
    end
  end
  redis.call('HSET', marks, token, string.format('%.0f', now + life) .. ':' .. ARGV[1])
  if redis.call('PTTL', marks) < life then redis.call('PEXPIRE', marks, life) end
  -- The broken hold's lock-delay ends with it (a clean release's does too).
  unmark(of(i, 5), KEYS[1])
end
-- Every later grant's token above the broken one, even if the counter was lost.
local counter = of(at, 1)
local last = redis.call('GET', counter)
if not last or above(fence, last) then redis.call('SET', counter, fence) end
local queue, waiters, channel = of(at, 3), of(at, 4), ARGV[7 + at]
local extra = 2 + 5 * n
local head, handed
if ARGV[2] == 'read' then
  local writer, readers = KEYS[extra], KEYS[extra + 1]
  redis.call('SREM', readers, KEYS[1])
  redis.call('DEL', KEYS[1])
  if live_readers(readers) == 0 and redis.call('EXISTS', writer) == 0 then
    -- Another hold's lock-delay (a reader that vanished) keeps the writer
    -- out until it ends.
    if latest(of(at, 5), now) then
      drop_free(writer, channel)
    else
      head, handed = hand_to_writer(writer, counter, queue, waiters, channel)
    end
  end
elseif ARGV[2] == 'write' then
  head, handed = hand_to_writer(KEYS[1], counter, queue, waiters, channel)
else
  head, handed = free(KEYS[1], counter, queue, waiters, channel)
  if ARGV[2] == 'leader' then
    ended(KEYS[extra], KEYS[1], v, head, now, ARGV[8 + n], ARGV[9 + n])
  end
end
if head then return {v, pttl, queued, at, head, handed} end
return {v, pttl, queued, at}
