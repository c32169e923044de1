//! Every Lua script the crate runs, with its KEYS/ARGV contract and replies.
//!
//! All of them go through [`redis::Script::invoke`]: EVALSHA, and a load and
//! retry when the server answers NOSCRIPT, so a flushed script cache or a
//! restarted server costs one extra round trip and nothing else.
//!
//! A lock key is a string `<owner token>:<fencing token>:<metadata>` with a
//! TTL (see `keys.rs`); the owner token is always 32 hex digits. "Ours"
//! means: the key is a string that starts with our token and a colon. A key
//! of another type, or owned by another token, is never extended or deleted.
//! The scripts are kept to as few Redis calls as possible: they run on every
//! lock and unlock.

use std::sync::LazyLock;

use redis::Script;

/// Shared by the scripts that check ownership. A key of another type makes
/// GET fail; `pcall` turns that into a table, which is not a string.
const OWNED: &str = r"
local function owned(key, token)
  local v = redis.pcall('GET', key)
  return type(v) == 'string' and string.sub(v, 1, #token + 1) == token .. ':'
end
";

/// Takes every lock key or none, and mints a fencing token; for a single
/// key, keeps waiters in a first-come, first-served queue.
///
/// - `KEYS[1]`: the fencing counter; `KEYS[2]`, `KEYS[3]`: the queue (a
///   sorted set of owner tokens by arrival) and its waiters' deadlines (a
///   hash); `KEYS[4..]`: the lock keys.
/// - `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms, `ARGV[3]`: metadata,
///   `ARGV[4]`: queue mode: `""` ignores the queue (multi-key locks,
///   Redlock), `"0"` respects it (a free lock with waiters queued is theirs),
///   `"<ms>"` respects it and, when the lock cannot be had, joins it (or
///   stays in it) for that many more milliseconds.
///
/// Waiters whose deadline passed are dropped from the head of the queue, so
/// a dead waiter holds the line for at most its last timeout; both queue
/// keys expire a second after the last waiter's timeout, so none outlives
/// its waiters. A key already ours counts as free, so a retry after a lost
/// reply succeeds (its value is overwritten). A missing counter (first use,
/// or data lost) starts from the server's clock in microseconds, so tokens
/// keep rising after a flush or a restart unless that clock went back.
/// Integers stay below 2^53, where Lua's numbers are exact, for thousands of
/// years.
///
/// Replies: a bulk string, the fencing token, when granted; an integer when
/// not: the PTTL in ms of the first busy key (-1: it has no TTL), or -2 when
/// the lock is free but others are queued first.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{OWNED}
local token, mode = ARGV[1], ARGV[4]
local queue, deadlines = KEYS[2], KEYS[3]
local busy = nil
for i = 4, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 and not owned(KEYS[i], token) then
    busy = redis.call('PTTL', KEYS[i])
    break
  end
end
if mode ~= '' and (busy or redis.call('EXISTS', queue) == 1) then
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  while head and tonumber(redis.call('HGET', deadlines, head) or '0') < now_ms do
    redis.call('ZREM', queue, head)
    redis.call('HDEL', deadlines, head)
    head = redis.call('ZRANGE', queue, 0, 0)[1]
  end
  if busy or (head and head ~= token) then
    local wait = tonumber(mode)
    if wait > 0 then
      local arrival = tonumber(now[1]) * 1000000 + tonumber(now[2])
      redis.call('ZADD', queue, 'NX', string.format('%.0f', arrival), token)
      redis.call('HSET', deadlines, token, string.format('%.0f', now_ms + wait))
      redis.call('PEXPIRE', queue, wait + 1000)
      redis.call('PEXPIRE', deadlines, wait + 1000)
    end
    return busy or -2
  end
  if head == token then
    redis.call('ZREM', queue, token)
    redis.call('HDEL', deadlines, token)
  end
end
if busy then return busy end
local fence = redis.call('INCR', KEYS[1])
if fence == 1 then
  local now = redis.call('TIME')
  fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  redis.call('SET', KEYS[1], string.format('%.0f', fence))
end
fence = string.format('%.0f', fence)
local value = token .. ':' .. fence .. ':' .. ARGV[3]
for i = 4, #KEYS do
  redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
end
return fence
"
    ))
});

/// Leaves the queue: a waiter that gave up.
///
/// - `KEYS[1]`, `KEYS[2]`: the queue and its deadlines. `ARGV[1]`: owner token.
///
/// Replies: the number of entries removed.
pub(crate) static DEQUEUE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
",
    )
});

/// Redlock: raises a counter to at least a floor after a grant, so the next
/// grant on this instance mints a larger token, and records the floor as the
/// fencing token of the lock keys that are ours (keeping their TTL).
///
/// - `KEYS[1]`: the fencing counter; `KEYS[2..]`: the lock keys.
/// - `ARGV[1]`: the floor (the largest token of the grant), `ARGV[2]`: owner
///   token, `ARGV[3]`: metadata.
///
/// Replies: 1.
pub(crate) static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{OWNED}
local floor = ARGV[1]
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(floor) then
  redis.call('SET', KEYS[1], floor)
end
for i = 2, #KEYS do
  if owned(KEYS[i], ARGV[2]) then
    redis.call('SET', KEYS[i], ARGV[2] .. ':' .. floor .. ':' .. ARGV[3], 'KEEPTTL')
  end
end
return 1
"
    ))
});

/// Sets the TTL of every lock key, only if all of them are ours.
///
/// - `KEYS`: the lock keys. `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms.
///
/// Replies: 1 when all were ours and got the TTL; 0 when any was not, in
/// which case none was touched.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{OWNED}
for i = 1, #KEYS do
  if not owned(KEYS[i], ARGV[1]) then return 0 end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
"
    ))
});

/// Deletes the lock keys that are ours and leaves every other key alone, and
/// announces each deleted key on the release channel, if one is given.
///
/// - `KEYS`: the lock keys. `ARGV[1]`: owner token, `ARGV[2]` (optional):
///   the release channel.
///
/// Replies: the number of keys deleted (all of them when the lock was held).
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(&RELEASE_SRC));

/// The source of [`RELEASE`], for the one place that sends it with a plain
/// `EVAL`: the clean-up after a lost acquire reply, which must not depend on
/// the script cache.
pub(crate) static RELEASE_SRC: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{OWNED}
local n = 0
for i = 1, #KEYS do
  if owned(KEYS[i], ARGV[1]) then
    redis.call('DEL', KEYS[i])
    n = n + 1
    if ARGV[2] and ARGV[2] ~= '' then
      redis.call('PUBLISH', ARGV[2], KEYS[i])
    end
  end
end
return n
"
    )
});

/// Reads who holds one lock key.
///
/// - `KEYS[1]`: the lock key.
///
/// Replies: an empty array when the key does not exist; otherwise
/// `[value, PTTL in ms]`, where the value is `""` for a key of another type.
pub(crate) static HOLDER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if not v then return {} end
if type(v) ~= 'string' then v = '' end
return {v, redis.call('PTTL', KEYS[1])}
",
    )
});
