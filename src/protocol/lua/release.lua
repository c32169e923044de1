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
-- Helpers: owned publish
-- Named so as not to shadow the names of the helpers defined below them.
local n_keys = tonumber(ARGV[3] or #KEYS)
local marked = ARGV[4] == '1'
local announced_on = ARGV[2] or ''
-- The queue's three keys, when given: not the marks that may follow the
-- lock keys instead (a lock on several keys has no queue).
local queued = #KEYS - n_keys - (marked and n_keys or 0) == 3
local fences, queue_of, waiters_of = nil, nil, nil
if queued then
  fences, queue_of, waiters_of = KEYS[n_keys + 1], KEYS[n_keys + 2], KEYS[n_keys + 3]
end
-- The common case first, before the helpers of the others are defined:
-- one key, no marks to clear; ours, and nobody queued (the queue's head
-- popped in the same call that finds none), it is freed and announced.
local popped = nil
if n_keys == 1 and not marked then
  if not owned(KEYS[1], ARGV[1]) then return 0 end
  popped = queued and announced_on ~= '' and redis.call('ZPOPMIN', queue_of)[1]
  if not popped then
    drop_free(KEYS[1], announced_on)
    return 1
  end
end
-- Helpers here: mint live_head give hand_over delay
if popped then
  -- Ours, its queue's head popped: handed to the first live waiter.
  local to, fence = free(KEYS[1], fences, queue_of, waiters_of, announced_on, popped)
  if to then return {1, to, fence} end
  return 1
end
local n, head, fence = 0, nil, nil
for i = 1, n_keys do
  if owned(KEYS[i], ARGV[1]) then
    n = n + 1
    if marked then unmark(KEYS[#KEYS - n_keys + i], KEYS[i]) end
    head, fence = free(KEYS[i], fences, queue_of, waiters_of, announced_on)
  end
end
if head then return {n, head, fence} end
return n
