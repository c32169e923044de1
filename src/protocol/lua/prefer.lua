-- Moves the first live candidate queued with a given value to the head of
-- an election's queue, for its leader (`Leadership::hand_over_to`), whose
-- resignation (`resign.lua`) then hands the lead to it: the rest of the
-- queue keeps its order. Only the leader may: the election key must be
-- its own. Candidates whose stay has passed are not chosen (and left for
-- the resignation to drop).
--
-- - `KEYS[1]`: the election key, `KEYS[2]`, `KEYS[3]`: the candidates'
--   queue and their entries (`<ms>:<stay>:<ttl>:<value>`, see
--   `lib/live_head.lua`).
-- - `ARGV[1]`: the leader's owner token, `ARGV[2]`: the value.
--
-- Replies: 1 when such a candidate is at the head now; 0 when none is
-- queued; -1 when the key is not the leader's (nothing is changed).
--
-- Helpers: owned mint live_head
if not owned(KEYS[1], ARGV[1]) then return -1 end
local queued = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local now = clock()
for i = 1, #queued, 2 do
  local m = queued[i]
  local entry = redis.call('HGET', KEYS[3], m)
  if alive(entry, now) and string.match(entry, '^%d+:%d+:%d+:(.*)$') == ARGV[2] then
    if i > 1 then
      -- Before the head: an arrival one microsecond earlier.
      redis.call('ZADD', KEYS[2], tonumber(queued[2]) - 1, m)
    end
    return 1
  end
end
return 0
