-- Shared by the scripts of an operator's view (a listing, a break): who
-- waits for a hold, as a listing shows it. Uses `lib/live_head.lua`'s
-- `alive`, so that comes before it.
--
-- `waiting(queue, waiters, most, now)` gives the metadata of each live
-- waiter among the first `most` queued, in queue order (for a read-write
-- lock led by `r` or `w`), never a waiter's owner token. Writes nothing.
--
-- Expects in scope: `alive` (`lib/live_head.lua`).
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/waiting
local function waiting(queue, waiters, most, now)
  local found = {}
  if redis.call('EXISTS', queue) == 0 then return found end
  for _, token in ipairs(redis.call('ZRANGE', queue, 0, tonumber(most) - 1)) do
    local entry = redis.call('HGET', waiters, token)
    if alive(entry, now) then
      found[#found + 1] = string.match(entry, '^%d+:%d+:%d+:(.*)$') or ''
    end
  end
  return found
end
-- luacheck: pop
