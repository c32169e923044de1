-- Shared by the scripts that free a lock or a writer key: `give` hands
-- `key` to the waiter `head` as a *claim*, for its TTL or its stay,
-- whichever is shorter, with a new fencing token and the metadata of its
-- entry, and announces `+<token>:<fence>:<key>`; `drop_free` deletes it
-- and announces `-<key>`. An announcement that fails (an ACL user without
-- rights on the channel) is skipped: the release stands, and waiters find
-- it at their next attempt. Uses `lib/mint.lua`, so that comes before it.
--
-- Expects in scope: `mint` (`lib/mint.lua`).
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/give 211/drop_free
local function give(key, counter, channel, head, stay, ttl, meta)
  local fence = mint(counter)
  -- A claim, until the grantee takes it up: no longer than it stays.
  local claim = tonumber(stay) < tonumber(ttl) and stay or ttl
  redis.call('SET', key, head .. ':' .. fence .. ':' .. meta, 'PX', claim)
  redis.pcall('PUBLISH', channel, '+' .. head .. ':' .. fence .. ':' .. key)
  return head, fence
end
local function drop_free(key, channel)
  redis.call('DEL', key)
  if channel ~= '' then redis.pcall('PUBLISH', channel, '-' .. key) end
end
-- luacheck: pop
