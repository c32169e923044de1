-- Takes one permit of a semaphore: the first of its permit keys that is
-- free, first come, first served with the other waiters, and mints a
-- fencing token. Each permit is a lock key of its own (value, TTL,
-- renewal, release and hand-over as a lock's), so a permit of a holder
-- that vanished expires on the server's clock like any lock.
--
-- - `KEYS` and `ARGV` as `acquire.lua`'s, where `KEYS[4..]` are the
--   semaphore's permit keys (as many as the caller's permit count) and the
--   queue is the semaphore's.
--
-- A permit already ours (a retry after a lost reply, or one handed over
-- by a release) is granted again with a new fencing token; a free permit
-- is taken only when no live waiter is queued before this one.
--
-- Replies: a bulk string `<fencing token>:<index of the permit>` when
-- granted; when not, `acquire.lua`'s refusal, with the smallest PTTL of the
-- permits (-1: none has a TTL; -2: a permit is free but others are queued
-- first).
--
-- Helpers: owned mint live_head join
local function grant(i)
  local fence = mint(KEYS[1])
  redis.call('SET', KEYS[i], token .. ':' .. fence .. ':' .. ARGV[3], 'PX', ARGV[2])
  return fence .. ':' .. (i - 4)
end
local free = nil
for i = 4, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if ours(v, token) then
    if mode ~= '' then leave() end
    return grant(i)
  end
  if not v then free = free or i end
end
if not free then
  if joining then join(clock()) end
  local soonest = -1
  for i = 4, #KEYS do
    local pttl = redis.call('PTTL', KEYS[i])
    if pttl >= 0 and (soonest < 0 or pttl < soonest) then soonest = pttl end
  end
  return refuse(soonest)
end
local refused = queue_turn()
if refused then return refused end
return grant(free)
