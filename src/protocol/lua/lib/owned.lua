-- Shared by the scripts that check ownership. A key of another type makes
-- GET fail; `pcall` turns that into a table, which is not a string.
--
-- Expects in scope: nothing but Redis's `redis`.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/ours 211/owned
local function ours(v, token)
  return type(v) == 'string' and string.sub(v, 1, #token + 1) == token .. ':'
end
local function owned(key, token)
  return ours(redis.pcall('GET', key), token)
end
-- luacheck: pop
