-- Shared by the scripts that free a lock: gives it to the first queued
-- waiter whose deadline has not passed (starting with `first`, when the
-- caller popped the queue's head already), with the metadata of its entry,
-- as a *claim*: for its TTL or its stay, whichever is shorter. The grantee
-- takes it up (renews it to its TTL) when it hears of it; a grantee that
-- is gone (killed while queued) keeps the lock from the others for at
-- most its stay, never its TTL. Announces `+<token>:<fence>:<key>` on the
-- channel; waiters whose deadline passed are dropped on the way. Without a
-- live waiter the key is deleted and `-<key>` announced (see
-- `lib/publish.lua`). Returns the grantee's token and fencing token, if
-- there was one. Reads the server's clock once (`TIME`), for the waiters'
-- deadlines and the token. Uses `lib/mint.lua`, `lib/live_head.lua`'s
-- `alive`, `lib/publish.lua` and `lib/give.lua`, so those come before it in
-- a script.
--
-- Expects in scope: `clock`, `mint` (`lib/mint.lua`), `alive` (`lib/live_head.lua`),
--   `drop_free` (`lib/publish.lua`), `give` (`lib/give.lua`).
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/hand_over 211/free
local function hand_over(key, counter, queue, waiters, channel, head)
  local now, micros = nil, nil
  while true do
    head = head or redis.call('ZPOPMIN', queue)[1]
    if not head then return nil end
    local entry = redis.call('HGET', waiters, head)
    redis.call('HDEL', waiters, head)
    if not now then
      local _
      now, _, micros = clock()
    end
    local stay, ttl, meta = string.match(entry or '', '^%d+:(%d+):(%d+):(.*)$')
    if ttl and alive(entry, now) then
      return give(key, counter, channel, head, stay, ttl, meta, micros)
    end
    head = nil
  end
end
local function free(key, counter, queue, waiters, channel, first)
  -- A missing queue pops nothing: no call of its own to look first.
  if channel ~= '' and queue then
    local head, fence = hand_over(key, counter, queue, waiters, channel, first)
    if head then return head, fence end
  end
  drop_free(key, channel)
  return nil
end
-- luacheck: pop
