-- Shared by the scripts that free a lock or a writer key: `give` hands
-- `key` to the waiter `head` as a *claim*, for its TTL or its stay,
-- whichever is shorter, with a new fencing token (minted at `micros`, the
-- server's clock in µs when the caller read it already, see `mint`) and
-- the metadata of its entry, and announces `+<token>:<fence>:<key>`. Uses
-- `lib/mint.lua` and `lib/publish.lua`, so those come before it.
--
-- Expects in scope: `mint` (`lib/mint.lua`), `announce` (`lib/publish.lua`).
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/give
local function give(key, counter, channel, head, stay, ttl, meta, micros)
  local fence = mint(counter, nil, nil, micros)
  -- A claim, until the grantee takes it up: no longer than it stays.
  local claim = tonumber(stay) < tonumber(ttl) and stay or ttl
  redis.call('SET', key, head .. ':' .. fence .. ':' .. meta, 'PX', claim)
  announce(channel, '+' .. head .. ':' .. fence .. ':' .. key)
  return head, fence
end
-- luacheck: pop
