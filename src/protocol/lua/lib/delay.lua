-- Shared by the scripts that grant, renew or release with lock-delay (see
-- `Builder::lock_delay`): beside a lock is a hash of *marks*, `marks`, one
-- field per lock key (a lock's, a permit's, a writer's or a read hold's),
-- whose value is the server time in ms before which nobody may be granted
-- that key: when its lease is due to end, plus the delay. Every grant and
-- renewal by a holder with a delay writes its mark; its clean release
-- deletes it; so a mark that remains is a lease that ended without a
-- release (its key expired, or was deleted or taken). The hash lives as
-- long as its latest mark, and each mark written drops two others at
-- random that have passed, so passed marks do not pile up in a hash that
-- others keep alive.
--
-- `delayed(marks, key, now)` gives the ms left of `key`'s delay (nil: none,
-- and a mark that has passed is dropped); `latest(marks, now)` the most
-- left of any key's; `mark(marks, key, now, ttl, delay)` records a lease of
-- `key` that ends `ttl` ms after `now` (server ms) and a delay of `delay`
-- ms after it; `unmark(marks, key)` is the clean release's.
--
-- Expects in scope: nothing but Redis's `redis`.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/delayed 211/latest 211/mark 211/unmark
local function delayed(marks, key, now)
  local till = redis.call('HGET', marks, key)
  if not till then return nil end
  local left = (tonumber(till) or 0) - now
  if left > 0 then return left end
  redis.call('HDEL', marks, key)
  return nil
end
local function latest(marks, now)
  local most = nil
  local all = redis.call('HGETALL', marks)
  for i = 1, #all, 2 do
    local left = delayed(marks, all[i], now)
    if left and (not most or left > most) then most = left end
  end
  return most
end
local function mark(marks, key, now, ttl, delay)
  local hold = tonumber(ttl) + delay
  -- Two other marks at random, dropped if passed: the hash of a read-write
  -- lock takes a mark per read hold, and while any of them renews it lives
  -- on, so the marks of holds that vanished go this way (at a cost that
  -- does not grow with the hash).
  local some = redis.call('HRANDFIELD', marks, 2, 'WITHVALUES')
  for i = 1, #some, 2 do
    if some[i] ~= key and (tonumber(some[i + 1]) or 0) <= now then
      redis.call('HDEL', marks, some[i])
    end
  end
  redis.call('HSET', marks, key, string.format('%.0f', now + hold))
  if redis.call('PTTL', marks) < hold then
    redis.call('PEXPIRE', marks, string.format('%.0f', hold))
  end
end
local function unmark(marks, key)
  if marks then redis.call('HDEL', marks, key) end
end
-- luacheck: pop
