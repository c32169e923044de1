-- Shared by the renewals: what a holder whose key is no longer its own is
-- told. When an operator broke its hold (`break.lua`), the marks of the
-- hold's slot (a hash: owner token -> `<until ms>:<reason>`) name its token,
-- and `lost` gives the reason; otherwise 0, the plain loss.
--
-- Expects in scope: nothing but Redis's `redis`.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/lost
local function lost(marks, token)
  local entry = redis.call('HGET', marks, token)
  local reason = entry and string.match(entry, '^%d+:(.+)$')
  return reason or 0
end
-- luacheck: pop
