-- Shared by the read-write lock's scripts: the read holds.
--
-- `live_readers` counts the read-hold keys in the set `readers` that still
-- exist, drops the others from it, and gives the longest PTTL among them
-- (-1 when one has none). `keep` makes a key live at least `ttl` ms more:
-- the set of read holds outlives every read hold in it.
--
-- Expects in scope: nothing but Redis's `redis`.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/live_readers 211/keep
local function live_readers(readers)
  local n, longest = 0, -2
  for _, k in ipairs(redis.call('SMEMBERS', readers)) do
    local pttl = redis.call('PTTL', k)
    if pttl == -2 then
      redis.call('SREM', readers, k)
    else
      n = n + 1
      if pttl == -1 or longest == -1 then longest = -1
      elseif pttl > longest then longest = pttl end
    end
  end
  return n, longest
end
local function keep(key, ttl)
  if redis.call('PTTL', key) < tonumber(ttl) then redis.call('PEXPIRE', key, ttl) end
end
-- luacheck: pop
