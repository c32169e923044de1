-- Shared by the scripts that read a waiters' queue. A waiter's entry in
-- the waiters hash is `<ms>:<stay ms>:<ttl ms>:<metadata>`: it was last
-- seen at `<ms>` (server clock) and stays queued until `<ms> + <stay>`;
-- the TTL and metadata are those of its lock, for a hand-over. An entry
-- that does not parse counts as expired.
--
-- `live_head` gives the first waiter whose deadline has not passed, and
-- its entry, after dropping the waiters before it whose deadline has.
--
-- Expects in scope: nothing but Redis's `redis`.
-- What this file defines, a script may leave unused (luacheck is told so):
-- luacheck: push ignore 211/alive 211/live_head
local function alive(entry, now)
  local at, stay = string.match(entry or '', '^(%d+):(%d+):')
  return at ~= nil and tonumber(at) + tonumber(stay) >= now
end
local function live_head(queue, waiters, now)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  while head do
    local entry = redis.call('HGET', waiters, head)
    if alive(entry, now) then return head, entry end
    redis.call('ZREM', queue, head)
    redis.call('HDEL', waiters, head)
    head = redis.call('ZRANGE', queue, 0, 0)[1]
  end
  return nil
end
-- luacheck: pop
