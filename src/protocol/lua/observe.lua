-- Reads an election as an observer follows it, in one step: the log's
-- entries after the last one the observer read, and the leader now.
--
-- - `KEYS[1]`: the election key, `KEYS[2]`: the log (see `lib/log.lua`).
-- - `ARGV[1]`: the id of the last entry the observer read (`0-0`: none
--   yet), or `''` for a first look, which returns no entry.
--
-- Replies: an array of
-- 1. the entries after `ARGV[1]`, flat: id, term, value, id, term, ...;
-- 2. the id of the log's latest entry (`0-0` for an empty or missing log);
-- 3. the election key's value (`''` when it is missing or not a string);
-- 4. its PTTL in ms;
-- 5. 1 when the entry `ARGV[1]` is no longer in a log that has entries
--    (trimmed by the cap, or the log expired and began again): entries
--    between it and the first returned may be gone; for `0-0` (the log
--    did not exist when the observer began, so every entry is news), 1
--    when the first entry returned is not the log's first (its `n` above
--    1, see `lib/log.lua`); else 0.
--
-- Helpers: (none)
local log, after = KEYS[2], ARGV[1]
local entries, latest, behind = {}, '0-0', 0
local newest = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
if newest then
  latest = newest[1]
  if after ~= '' then
    local read = redis.call('XRANGE', log, '(' .. after, '+')
    for _, e in ipairs(read) do
      entries[#entries + 1] = e[1]
      entries[#entries + 1] = e[2][2]
      entries[#entries + 1] = e[2][4]
    end
    if after ~= '0-0' then
      if #redis.call('XRANGE', log, after, after) == 0 then behind = 1 end
    elseif read[1] and (tonumber(read[1][2][6]) or 1) > 1 then
      behind = 1
    end
  end
end
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then v = '' end
return {entries, latest, v, redis.call('PTTL', KEYS[1]), behind}
