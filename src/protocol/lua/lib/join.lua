-- Shared by the scripts that take a lock or a permit with a queue
-- (`KEYS[1..3]`: the fencing counter, the queue, its waiters; `ARGV[1..5]`:
-- owner token, TTL in ms, metadata, queue mode, how long the queue keys
-- live; see `acquire.lua`; `ARGV[6]`, for a read-write lock only: `r` or
-- `w`, which leads the metadata in the waiter's entry). Uses `lib/live_head.lua`'s
-- `alive`.
--
-- `join` puts this waiter in the queue (or keeps it there) with its entry;
-- `refuse` is the reply of a refused attempt: the given PTTL and the
-- fencing counter as it stands; `leave` takes it out of the queue;
-- `queue_turn` says whether it may take a free lock now. Uses `lib/mint.lua`'s
-- `clock` too.
--
-- Expects in scope: `clock` (`lib/mint.lua`), `alive`, `live_head` (`lib/live_head.lua`);
--   `KEYS[1..3]`, `ARGV[1..6]` as above.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/join 211/refuse 211/leave 211/queue_turn
-- luacheck: ignore 211/token 211/mode 211/queue 211/waiters 211/joining
local token, mode = ARGV[1], ARGV[4]
local queue, waiters = KEYS[2], KEYS[3]
-- Whether a refused attempt joins the queue (or stays in it).
local joining = mode ~= '' and mode ~= '0'
local function join(now, ms, micros)
  -- A waiter whose stay ran out lost its place: it queues at the back.
  if alive(redis.call('HGET', waiters, token), now) then
    redis.call('ZADD', queue, 'NX', micros, token)
  else
    redis.call('ZADD', queue, micros, token)
  end
  redis.call('HSET', waiters, token, ms .. ':' .. mode .. ':' .. ARGV[2] .. ':' .. (ARGV[6] or '') .. ARGV[3])
  redis.call('PEXPIRE', queue, ARGV[5])
  redis.call('PEXPIRE', waiters, ARGV[5])
end
local function refuse(pttl)
  return {pttl, tonumber(redis.call('GET', KEYS[1]) or '0')}
end
local function leave()
  redis.call('ZREM', queue, token)
  redis.call('HDEL', waiters, token)
end
-- Before a free lock (or permit) is taken: a refusal when a live waiter is
-- queued before this one (which then joins, or stays, behind it); nil when
-- it may be taken, after leaving the queue if it was at its head.
local function queue_turn()
  if mode == '' or redis.call('EXISTS', queue) == 0 then return nil end
  local now, ms, micros = clock()
  local head = live_head(queue, waiters, now)
  if head and head ~= token then
    if joining then join(now, ms, micros) end
    return refuse(-2)
  end
  if head == token then leave() end
  return nil
end
-- luacheck: pop
