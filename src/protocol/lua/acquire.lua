-- Takes every lock key or none, and mints a fencing token; for a single
-- key, keeps waiters in a first-come, first-served queue.
--
-- - `KEYS[1]`: the fencing counter; `KEYS[2]`, `KEYS[3]`: the queue (a
--   sorted set of owner tokens by arrival) and its waiters (a hash of
--   entries, see `lib/live_head.lua`); `KEYS[4..3+m]`: the m lock keys;
--   `KEYS[4+m..3+2m]`: the lock-delay marks of each (see `lib/delay.lua`).
-- - `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms, `ARGV[3]`: metadata,
--   `ARGV[4]`: queue mode: `""` ignores the queue (multi-key locks,
--   Redlock), `"0"` respects it (a free lock with waiters queued is theirs),
--   `"<ms>"` respects it and, when the lock cannot be had, joins it (or
--   stays in it) for that many more milliseconds; `ARGV[5]`: how long the
--   queue keys live after that, in ms (`<ms>` + 1000); `ARGV[6]`: empty;
--   `ARGV[7]` (optional): the least token to mint (Redlock's proposal),
--   `ARGV[8]` (with it): how far in µs it may lead this server's clock;
--   `ARGV[9]` (optional, `ARGV[6..8]` then given, empty if unused): this
--   holder's lock-delay in ms, recorded with the grant.
--
-- Waiters whose deadline passed are dropped from the head of the queue, so
-- a dead waiter holds the line for at most its last timeout, and one that
-- asks again after its deadline queues at the back, as a newcomer; both queue
-- keys expire a second after the last waiter's timeout, so none outlives
-- its waiters. Keys that are all ours already (a retry after a lost reply,
-- or a lock handed over by a release) are granted again whatever the queue
-- says, with a new fencing token. A missing key whose previous lease ended
-- without a release is granted to nobody until its lock-delay has passed.
--
-- Replies: a bulk string, the fencing token, when granted; when not, an
-- array of the PTTL in ms of the first busy key (-1: it has no TTL; -2: the
-- lock is free but others are queued first) and the fencing counter as it
-- stands (0 when missing), below which no hand-over can be newer than this
-- attempt; a third element, 1, when the wait is a lock-delay, whose ms
-- left the first gives: come back then.
--
-- Helpers: mint
-- The common case first, in as few calls as it takes, before the helpers
-- of the others are defined: a single key (with its marks, five keys),
-- free, nobody queued, no lock-delay marked (one `EXISTS`); with no
-- lock-delay of this holder's to record, granted at once.
local free = #KEYS == 5 and redis.call('EXISTS', KEYS[4], KEYS[2], KEYS[5]) == 0
if free and not ARGV[9] then
  local fence = mint(KEYS[1], ARGV[7], ARGV[8])
  redis.call('SET', KEYS[4], ARGV[1] .. ':' .. fence .. ':' .. ARGV[3], 'PX', ARGV[2])
  return fence
end
-- Helpers here: owned live_head join delay
local last = 3 + (#KEYS - 3) / 2
-- The lock-delay marks of lock key `i`.
local function marks(i) return KEYS[i + last - 3] end
local delay = tonumber(ARGV[9] or '0')
local function grant()
  local fence = mint(KEYS[1], ARGV[7], ARGV[8])
  local value = token .. ':' .. fence .. ':' .. ARGV[3]
  local now = delay > 0 and clock()
  for i = 4, last do
    redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
    if now then mark(marks(i), KEYS[i], now, ARGV[2], delay) end
  end
  return fence
end
if free then return grant() end
local busy, mine, wait = nil, true, nil
for i = 4, last do
  local v = redis.pcall('GET', KEYS[i])
  if not v then
    mine = false
    local left = delayed(marks(i), KEYS[i], clock())
    if left and (not wait or left > wait) then wait = left end
  elseif not ours(v, token) then
    mine, busy = false, redis.call('PTTL', KEYS[i])
    break
  end
end
if busy then
  if joining then
    join(clock())
  end
  return refuse(busy)
end
if wait then
  if joining then join(clock()) end
  local refused = refuse(wait)
  refused[3] = 1
  return refused
end
if not mine then
  local refused = queue_turn()
  if refused then return refused end
end
return grant()
