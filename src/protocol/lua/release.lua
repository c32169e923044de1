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
local n, head, fence = 0, nil, nil
for i = 1, n_keys do
  if owned(KEYS[i], ARGV[1]) then
    n = n + 1
    if marked then unmark(KEYS[#KEYS - n_keys + i], KEYS[i]) end
    -- Without a queue, the three keys after the lock keys are nil.
    head, fence = free(KEYS[i], KEYS[n_keys + 1], KEYS[n_keys + 2], KEYS[n_keys + 3], channel)
  end
end
if head then return {n, head, fence} end
return n
