-- Takes a read or the write hold of a read-write lock, with writer
-- preference: a reader is let in while no writer holds the lock and no
-- live writer is queued before it (readers queued before it do not stop
-- it); the writer only when no writer and no reader holds it and no live
-- waiter of either kind is queued before it. So a queued writer stops the
-- readers who come after it, and when it releases, every reader queued
-- before the next writer may go in at once. Mints a fencing token for
-- every hold, read or write.
--
-- - `KEYS[1..3]` and `ARGV[1..5]` as `acquire.lua`'s, with the lock's own
--   queue; `KEYS[4]`: the hold's key (a read hold's own key, or the writer
--   key), `KEYS[5]`: the writer key, `KEYS[6]`: the set of read-hold keys;
--   `ARGV[6]`: `r` for a read hold, `w` for the write hold; `KEYS[7]`: the
--   lock-delay marks, `ARGV[9]` (optional, `ARGV[7..8]` then empty): this
--   holder's lock-delay in ms (see `acquire.lua`).
--
-- A hold already ours (a retry after a lost reply) is granted again with
-- a new fencing token. A read hold's key joins the set of read holds,
-- which is kept alive as long as its longest-lived member. While a
-- lock-delay lasts (a writer's, for a reader; a writer's or any read
-- hold's, for a writer) nobody is let in.
--
-- Replies: as `acquire.lua`'s; a refusal carries the writer's PTTL, or the
-- longest PTTL of the read holds a writer waits for, or -2 when others
-- are queued first; as `acquire.lua`'s while a lock-delay lasts.
--
-- Helpers: owned mint live_head join readers delay
local hold, writer, readers, marks = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local reading = ARGV[6] == 'r'
local delay = tonumber(ARGV[9] or '0')
local function grant()
  local fence = mint(KEYS[1])
  redis.call('SET', hold, token .. ':' .. fence .. ':' .. ARGV[3], 'PX', ARGV[2])
  if delay > 0 then mark(marks, hold, clock(), ARGV[2], delay) end
  if reading then
    redis.call('SADD', readers, hold)
    keep(readers, ARGV[2])
  end
  if mode ~= '' then leave() end
  return fence
end
local function wait(pttl)
  if joining then join(clock()) end
  return refuse(pttl)
end
-- A lock-delay: nobody goes in before it ends.
local function delayed_by(left)
  local refused = wait(left)
  refused[3] = 1
  return refused
end
if ours(redis.pcall('GET', hold), token) then return grant() end
if redis.call('EXISTS', writer) == 1 then return wait(redis.call('PTTL', writer)) end
local marked = redis.call('EXISTS', marks) == 1
if marked then
  local left = delayed(marks, writer, clock())
  if left then return delayed_by(left) end
end
if reading then
  -- Stopped only by a live writer queued before this reader.
  if mode ~= '' and redis.call('EXISTS', queue) == 1 then
    local now, ms, micros = clock()
    for _, m in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
      if m == token then break end
      local e = redis.call('HGET', waiters, m)
      if not alive(e, now) then
        redis.call('ZREM', queue, m)
        redis.call('HDEL', waiters, m)
      elseif string.match(e, '^%d+:%d+:%d+:(.)') == 'w' then
        if joining then join(now, ms, micros) end
        return refuse(-2)
      end
    end
  end
  return grant()
end
local n, longest = live_readers(readers)
if n > 0 then return wait(longest) end
-- No read hold is live: the marks left are of holds that ended unreleased.
if marked then
  local left = latest(marks, clock())
  if left then return delayed_by(left) end
end
local refused = queue_turn()
if refused then return refused end
return grant()
