-- Shared by the read-write lock's releases (after `lib/mint.lua`, `lib/live_head.lua`,
-- `lib/publish.lua` and `lib/give.lua`): `hand_to_writer` gives the free writer key to the first live
-- waiter when it is a writer, as a claim (as `lib/hand_over.lua` does for a lock: for
-- its TTL or its stay, whichever is shorter), announced
-- `+<token>:<fence>:<writer key>`; when the first is a reader, or nobody
-- waits, it deletes the writer key (if it is still there) and announces
-- `-<writer key>`, which wakes the waiters: every reader queued before
-- the next writer goes in. Returns the grantee's token and fencing token,
-- if there was one.
--
-- Expects in scope: `clock`, `mint` (`lib/mint.lua`), `live_head` (`lib/live_head.lua`),
--   `drop_free` (`lib/publish.lua`), `give` (`lib/give.lua`).
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/hand_to_writer
local function hand_to_writer(writer, counter, queue, waiters, channel)
  if channel ~= '' and redis.call('EXISTS', queue) == 1 then
    local now, _, micros = clock()
    local head, entry = live_head(queue, waiters, now)
    local stay, ttl, meta = string.match(entry or '', '^%d+:(%d+):(%d+):w(.*)$')
    if head and ttl then
      redis.call('ZREM', queue, head)
      redis.call('HDEL', waiters, head)
      return give(writer, counter, channel, head, stay, ttl, meta, micros)
    end
  end
  drop_free(writer, channel)
  return nil
end
-- luacheck: pop
