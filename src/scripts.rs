//! Every Lua script the crate runs, with its KEYS/ARGV contract and replies.
//!
//! All of them go through [`redis::Script::invoke`]: EVALSHA, and a load and
//! retry when the server answers NOSCRIPT, so a flushed script cache or a
//! restarted server costs one extra round trip and nothing else.
//!
//! A lock key is a hash `{owner, fence, meta}` with a TTL (see `keys.rs`).
//! "Ours" means: the key is a hash and its `owner` field equals our token. A
//! key of another type, or a hash owned by another token, is never extended
//! or deleted.

use std::sync::LazyLock;

use redis::Script;

/// Shared by the scripts that check ownership.
const OWNED: &str = r"
local function owned(key, token)
  return redis.call('TYPE', key).ok == 'hash' and redis.call('HGET', key, 'owner') == token
end
";

/// Takes every lock key or none, and mints a fencing token.
///
/// - `KEYS[1]`: the fencing counter; `KEYS[2..]`: the lock keys.
/// - `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms, `ARGV[3]`: metadata.
///
/// A key already ours counts as free, so a retry after a lost reply succeeds.
/// The counter never falls below the server's clock in microseconds (it is
/// raised to it before the increment), so tokens keep rising after a flush,
/// a restart or a failover to a replica that missed the last grants, unless
/// the clocks involved disagree by more than the time that passed. Integers
/// stay below 2^53, where Lua's numbers are exact, for thousands of years.
///
/// Replies: a bulk string, the fencing token, when granted; an integer, the
/// PTTL in ms of the first busy key (-1: it has no TTL), when not.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{OWNED}
local token = ARGV[1]
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 and not owned(KEYS[i], token) then
    return redis.call('PTTL', KEYS[i])
  end
end
local now = redis.call('TIME')
local clock = now[1] .. string.format('%06d', tonumber(now[2]))
local count = redis.call('GET', KEYS[1])
if not count or tonumber(count) < tonumber(clock) then
  redis.call('SET', KEYS[1], clock)
end
redis.call('INCR', KEYS[1])
local fence = redis.call('GET', KEYS[1])
for i = 2, #KEYS do
  redis.call('DEL', KEYS[i])
  redis.call('HSET', KEYS[i], 'owner', token, 'fence', fence, 'meta', ARGV[3])
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return fence
"
    ))
});

/// Redlock: raises a counter to at least a floor after a grant, so the next
/// grant on this instance mints a larger token, and records the floor as the
/// `fence` of the lock keys that are ours.
///
/// - `KEYS[1]`: the fencing counter; `KEYS[2..]`: the lock keys.
/// - `ARGV[1]`: the floor (the largest token of the grant), `ARGV[2]`: owner token.
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
    redis.call('HSET', KEYS[i], 'fence', floor)
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

/// Deletes the lock keys that are ours and leaves every other key alone.
///
/// - `KEYS`: the lock keys. `ARGV[1]`: owner token.
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
/// `[metadata, fencing token, PTTL in ms]`, with `""` and `"0"` for a key that
/// redmutex did not write (another type, or a hash without our fields).
pub(crate) static HOLDER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then return {} end
local pttl = redis.call('PTTL', KEYS[1])
if t ~= 'hash' then return {'', '0', pttl} end
local v = redis.call('HMGET', KEYS[1], 'meta', 'fence')
return {v[1] or '', v[2] or '0', pttl}
",
    )
});
