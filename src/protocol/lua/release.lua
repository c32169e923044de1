-- Deletes the lock keys that are ours and leaves every other key alone;
-- announces each freed key on the release channel, if one is given, and
-- for a single key with a queue, hands the lock to the first live waiter.
--
-- - `KEYS[1..n]`: the lock keys; with a queue, `KEYS[n+1..n+3]`: the
--   fencing counter, the queue and its waiters. `ARGV[1]`: owner token,
--   `ARGV[2]` (optional): the release channel, `ARGV[3]` (optional): `n`
--   (all the keys when missing), `ARGV[4]` (optional): `1` when the last
--   n keys are the lock-delay marks of each lock key, whose mark of each
--   freed key is deleted (a clean release: see `lib/delay.lua`).
--
-- Replies: the number of keys deleted (all of them when the lock was held);
-- after a hand-over, an array of that number, the grantee's owner token
-- and its fencing token.
--
-- Helpers: owned mint live_head give hand_over delay
local n_keys = tonumber(ARGV[3] or #KEYS)
local marked = ARGV[4] == '1'
local channel = ARGV[2] or ''
-- The queue's three keys, when given: not the marks that may follow the
-- lock keys instead (a lock on several keys has no queue).
local queued = #KEYS - n_keys - (marked and n_keys or 0) == 3
local counter, queue, waiters = nil, nil, nil
if queued then counter, queue, waiters = KEYS[n_keys + 1], KEYS[n_keys + 2], KEYS[n_keys + 3] end
local n, head, fence = 0, nil, nil
for i = 1, n_keys do
  if owned(KEYS[i], ARGV[1]) then
    n = n + 1
    if marked then unmark(KEYS[#KEYS - n_keys + i], KEYS[i]) end
    head, fence = free(KEYS[i], counter, queue, waiters, channel)
  end
end
if head then return {n, head, fence} end
return n
