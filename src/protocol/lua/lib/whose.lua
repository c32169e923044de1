-- Shared by the scripts of an operator's view (`inspect.lua`, `break.lua`):
-- under which prefix a hold's key is. A lock key does not say it (`a:b:c`
-- is lock `c` of prefix `a:b`, lock `b:c` of `a`, or `a:b:c` of none), so
-- the caller names each prefix it may be under, the longest first, with
-- that prefix's keys of the hold: `per` keys apiece from `KEYS[2]` on,
-- its fencing counter (in the key's slot) first. A script that writes a
-- hold's value with fencing token `t` under a prefix leaves that prefix's
-- counter at `t` or above in the same script (`lib/mint.lua`,
-- `raise_fence.lua`, `break.lua`), so only a prefix whose counter has
-- reached the token can have written it. An internal key (a permit's, a
-- read-write lock's, a leader's) names its prefix: the caller names that
-- one alone.
--
-- `whose(fence, per, n)` gives the places (1 to `n`, the longest prefix
-- first) of the prefixes whose counter has reached `fence` (a decimal
-- string; none when it is nil).
--
-- Expects in scope: `above` (`lib/mint.lua`).
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/whose
local function whose(fence, per, n)
  local places = {}
  if not fence then return places end
  for i = 1, n do
    local counter = redis.pcall('GET', KEYS[2 + per * (i - 1)])
    if type(counter) == 'string' and not above(fence, counter) then
      places[#places + 1] = i
    end
  end
  return places
end
-- luacheck: pop
