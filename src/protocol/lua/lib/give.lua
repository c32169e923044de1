-- Shared by the scripts that free a lock or a writer key: `give` hands
-- `key` to the waiter `head` as a *claim*, for its TTL or its stay,
-- whichever is shorter, with a new fencing token and the metadata of its
-- entry, and announces `+<token>:<fence>:<key>`; `drop_free` deletes it
-- and announces `-<key>`; `announce` sends a message on the release
-- channel: with `SPUBLISH` on a cluster's shard channel (it ends with the
-- slot's hash tag, `...released:{<tag>}`: the message stays on the shard),
-- else `PUBLISH`. An announcement that fails (an ACL user without rights on
-- the channel, a server before 7.0 that has no `SPUBLISH`) is skipped: the
-- release stands, and waiters find it at their next attempt. Uses
-- `lib/mint.lua`, so that comes before it.
--
-- Expects in scope: `mint` (`lib/mint.lua`).
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/give 211/drop_free 211/announce
local function announce(channel, message)
  if channel == '' then return end
  local publish = string.sub(channel, -1) == '}' and 'SPUBLISH' or 'PUBLISH'
  redis.pcall(publish, channel, message)
end
local function give(key, counter, channel, head, stay, ttl, meta)
  local fence = mint(counter)
  -- A claim, until the grantee takes it up: no longer than it stays.
  local claim = tonumber(stay) < tonumber(ttl) and stay or ttl
  redis.call('SET', key, head .. ':' .. fence .. ':' .. meta, 'PX', claim)
  announce(channel, '+' .. head .. ':' .. fence .. ':' .. key)
  return head, fence
end
local function drop_free(key, channel)
  redis.call('DEL', key)
  announce(channel, '-' .. key)
end
-- luacheck: pop
