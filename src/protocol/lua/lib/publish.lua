-- Shared by the scripts that free a lock or a writer key: `announce` sends
-- a message on the release channel: with `SPUBLISH` on a cluster's shard
-- channel (it ends with the slot's hash tag, `...released:{<tag>}`: the
-- message stays on the shard), else `PUBLISH`; `drop_free` deletes `key`
-- and announces `-<key>`. An announcement that fails (an ACL user without
-- rights on the channel, a server before 7.0 that has no `SPUBLISH`) is
-- skipped: the release stands, and waiters find it at their next attempt.
--
-- Expects in scope: nothing but Redis's `redis`.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/announce 211/drop_free
local function announce(channel, message)
  if channel == '' then return end
  local publish = string.sub(channel, -1) == '}' and 'SPUBLISH' or 'PUBLISH'
  redis.pcall(publish, channel, message)
end
local function drop_free(key, channel)
  redis.call('DEL', key)
  announce(channel, '-' .. key)
end
-- luacheck: pop
