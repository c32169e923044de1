-- Shared by the scripts that free a lock: gives it to the first queued
-- waiter whose deadline has not passed, with the metadata of its entry,
-- as a *claim*: for its TTL or its stay, whichever is shorter. The grantee
-- takes it up (renews it to its TTL) when it hears of it; a grantee that
-- is gone (killed while queued) keeps the lock from the others for at
-- most its stay, never its TTL. Announces `+<token>:<fence>:<key>` on the
-- channel; waiters whose deadline passed are dropped on the way. Without a
-- live waiter the key is deleted and `-<key>` announced (see `lib/give.lua`).
-- Returns the grantee's token and fencing token, if there was one. Uses
-- `lib/mint.lua`, `lib/live_head.lua`'s `alive` and `lib/give.lua`, so those come before it in a
-- script.
--
-- Expects in scope: `clock`, `mint` (`lib/mint.lua`), `alive` (`lib/live_head.lua`),
--   `give`, `drop_free` (`lib/give.lua`).
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/hand_over 211/free
local function hand_over(key, counter, queue, waiters, channel)
  local now = nil
  while true do
    local head = redis.call('ZPOPMIN', queue)[1]
    if not head then return nil end
    local entry = redis.call('HGET', waiters, head)
    redis.call('HDEL', waiters, head)
    now = now or clock()
    local stay, ttl, meta = string.match(entry or '', '^%d+:(%d+):(%d+):(.*)$')
    if ttl and alive(entry, now) then
      return give(key, counter, channel, head, stay, ttl, meta)
    end
  end
end
local function free(key, counter, queue, waiters, channel)
  -- EXISTS first: on a missing key it costs far less than a read.
  if channel ~= '' and queue and redis.call('EXISTS', queue) == 1 then
    local head, fence = hand_over(key, counter, queue, waiters, channel)
    if head then return head, fence end
  end
  drop_free(key, channel)
  return nil
end
-- luacheck: pop
