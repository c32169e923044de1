-- Takes one permit of a semaphore: the first of its permit keys that is
-- free, first come, first served with the other waiters, and mints a
-- fencing token. Each permit is a lock key of its own (value, TTL,
-- renewal, release and hand-over as a lock's), so a permit of a holder
-- that vanished expires on the server's clock like any lock.
--
-- - `KEYS` and `ARGV` as `acquire.lua`'s, where `KEYS[4..n-1]` are the
--   semaphore's permit keys (as many as the caller's permit count), the
--   queue is the semaphore's and `KEYS[n]` its lock-delay marks.
--
-- A permit already ours (a retry after a lost reply, or one handed over
-- by a release) is granted again with a new fencing token; a free permit
-- is taken only when no live waiter is queued before this one, and not
-- while its lock-delay lasts.
--
-- Replies: a bulk string `<fencing token>:<index of the permit>` when
-- granted; when not, `acquire.lua`'s refusal, with the smallest PTTL of the
-- permits (-1: none has a TTL; -2: a permit is free but others are queued
-- first); or, when a lock-delay ends before any permit's TTL, the ms
-- left of the soonest and a third element, 1 (see `acquire.lua`).
--
-- Helpers: owned mint live_head join delay
local marks, last = KEYS[#KEYS], #KEYS - 1
local delay = tonumber(ARGV[9] or '0')
local function grant(i)
  local fence = mint(KEYS[1])
  redis.call('SET', KEYS[i], token .. ':' .. fence .. ':' .. ARGV[3], 'PX', ARGV[2])
  if delay > 0 then mark(marks, KEYS[i], clock(), ARGV[2], delay) end
  return fence .. ':' .. (i - 4)
end
local free, wait = nil, nil
local now = redis.call('EXISTS', marks) == 1 and clock()
for i = 4, last do
  local v = redis.pcall('GET', KEYS[i])
  if ours(v, token) then
    if mode ~= '' then leave() end
    return grant(i)
  end
  if not v and not free then
    local left = now and delayed(marks, KEYS[i], now)
    if not left then
      free = i
    elseif not wait or left < wait then
      wait = left
    end
  end
end
if not free then
  if joining then join(clock()) end
  local soonest = -1
  for i = 4, last do
    local pttl = redis.call('PTTL', KEYS[i])
    if pttl >= 0 and (soonest < 0 or pttl < soonest) then soonest = pttl end
  end
  if wait and (soonest < 0 or wait <= soonest) then
    local refused = refuse(wait)
    refused[3] = 1
    return refused
  end
  return refuse(soonest)
end
local refused = queue_turn()
if refused then return refused end
return grant(free)
