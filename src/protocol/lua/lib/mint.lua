-- Shared by the scripts that grant a lock or queue for one: the server's
-- clock, and the next fencing token.
--
-- `clock()` gives the time in ms as a number, and as strings in ms and in
-- µs, built from TIME's digits: Lua formats a number with `sprintf`, which
-- costs about a microsecond a time here, and in exponent form past 14
-- digits.
--
-- `mint` gives `max(counter + 1, server clock in µs, at_least)` and
-- stores it, on every grant (`at_least`, a token of the same form, is
-- optional: a Redlock acquisition proposes the token it would like every
-- master to mint, see [`acquire`]). A proposal counts only up to the
-- server clock plus `lead` µs (given with it): a client clock that runs
-- fast cannot push the counter further ahead of this server's own clock,
-- which alone it follows after a data loss. So tokens rise across anything that takes the counter back
-- (a restart from an older snapshot or AOF, a failover to a lagging
-- replica, a flush) as long as the server clock does not go back. Tokens
-- are compared as decimal strings of the same form (no sign, no leading
-- zero), longer meaning larger, so no number is formatted; integers stay
-- below 2^53, where Lua's numbers are exact, for thousands of years.
-- `micros` (optional): the server clock in µs, when the caller read it
-- already (one `TIME` a script).
--
-- The counter is read and written in one call (`SET ... GET`, Redis 6.2):
-- the clock is almost always past it; when it is not (two grants in one
-- µs, a clock that went back, a Redlock proposal ahead of this clock),
-- the counter is put back and raised by one.
--
-- Expects in scope: nothing but Redis's `redis`.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/clock 211/above 211/mint
local function clock()
  local now = redis.call('TIME')
  local usec = string.rep('0', 6 - #now[2]) .. now[2]
  local ms = now[1] .. string.sub(usec, 1, 3)
  return tonumber(ms), ms, now[1] .. usec
end
-- Whether token a is above token b (both decimal strings of that form).
local function above(a, b)
  return #a > #b or (#a == #b and a > b)
end
local function mint(counter, at_least, lead, micros)
  if not micros then
    local _
    _, _, micros = clock()
  end
  if at_least and above(at_least, micros) then
    -- At most `lead` µs ahead of this server's clock (exact below 2^53).
    local most = tonumber(micros) + (tonumber(lead) or 0)
    if tonumber(at_least) <= most then
      micros = at_least
    else
      micros = string.format('%.0f', most)
    end
  end
  local last = redis.call('SET', counter, micros, 'GET')
  if last and not above(micros, last) then
    -- One above the counter as it was, exactly: INCR on its own digits.
    redis.call('SET', counter, last)
    redis.call('INCR', counter)
    micros = redis.call('GET', counter)
  end
  return micros
end
-- luacheck: pop
