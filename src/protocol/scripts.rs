//! Every Lua script the crate runs, with its KEYS/ARGV contract and replies,
//! and one typed caller per script that builds its KEYS and ARGV in that
//! order (the replies are parsed in `replies.rs`).
//!
//! All of them go through [`Call::invoke`]: EVALSHA, and when the server
//! answers NOSCRIPT, EVAL with the source, so a flushed script cache or a
//! restarted server costs one extra round trip and nothing else.
//!
//! A lock key is a string `<owner token>:<fencing token>:<metadata>` with a
//! TTL (see `keys.rs`); the owner token is always 32 hex digits. "Ours"
//! means: the key is a string that starts with our token and a colon. A key
//! of another type, or owned by another token, is never extended or deleted.
//! The scripts are kept to as few Redis calls as possible: they run on every
//! lock and unlock.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{
    Cmd, ConnectionLike, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind,
    ToRedisArgs,
};

use crate::protocol::keys::{Hold, LockKeys};
use crate::time;

/// One of the crate's scripts: its source, and the SHA1 that `EVALSHA`
/// names it by.
pub(crate) struct Lua {
    source: String,
    sha: String,
}

impl Lua {
    fn new(source: impl Into<String>) -> Lua {
        let source = source.into();
        let sha = Script::new(&source).get_hash().to_owned();
        Lua { source, sha }
    }

    /// A call of this script, without keys or arguments yet.
    fn call(&'static self) -> Call {
        Call {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// A call of one of the crate's scripts with its `KEYS` and `ARGV`. (No
/// `Debug`: the arguments hold an owner token.)
pub(crate) struct Call {
    lua: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Call {
        key.write_redis_args(&mut self.keys);
        self
    }

    fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Call {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Runs the script by its SHA1; when the server's script cache does not
    /// have it (a new, restarted or failed-over server, a `SCRIPT FLUSH`),
    /// by its source: `EVAL` runs it and caches it again in one command.
    /// (`SCRIPT LOAD` and a second `EVALSHA`, as redis-rs's `invoke` does,
    /// fails the call when the cache is emptied again between the two.) A
    /// NOSCRIPT reply means the script did not run, so running it once more
    /// is safe.
    pub(crate) fn invoke<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> RedisResult<T> {
        match self.command("EVALSHA", &self.lua.sha).query(con) {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.eval().query(con)
            }
            other => other,
        }
    }

    /// This call as a plain `EVAL` of the script's source, which needs no
    /// script cache.
    fn eval(&self) -> Cmd {
        self.command("EVAL", &self.lua.source)
    }

    fn command(&self, name: &str, script: &str) -> Cmd {
        // Sized up front: a command grown argument by argument leaves a freed
        // buffer of each size it went through in its thread's malloc cache
        // (23 MB more resident over the benchmark's 10,000 watchdogs).
        let bytes = self
            .keys
            .iter()
            .chain(&self.args)
            .map(Vec::len)
            .sum::<usize>();
        let mut cmd = Cmd::with_capacity(
            3 + self.keys.len() + self.args.len(),
            name.len() + script.len() + 4 + bytes,
        );
        cmd.arg(name)
            .arg(script)
            .arg(self.keys.len())
            .arg(&*self.keys)
            .arg(&*self.args);
        cmd
    }
}

/// Shared by the scripts that check ownership. A key of another type makes
/// GET fail; `pcall` turns that into a table, which is not a string.
const OWNED: &str = r"
local function ours(v, token)
  return type(v) == 'string' and string.sub(v, 1, #token + 1) == token .. ':'
end
local function owned(key, token)
  return ours(redis.pcall('GET', key), token)
end
";

/// Shared by the scripts that grant a lock or queue for one: the server's
/// clock, and the next fencing token.
///
/// `clock()` gives the time in ms as a number, and as strings in ms and in
/// µs, built from TIME's digits: Lua formats a number with `sprintf`, which
/// costs about a microsecond a time here, and in exponent form past 14
/// digits.
///
/// `mint` gives `max(counter + 1, server clock in µs, at_least)` and
/// stores it, on every grant (`at_least`, a token of the same form, is
/// optional: a Redlock acquisition proposes the token it would like every
/// master to mint, see [`acquire`]). A proposal counts only up to the
/// server clock plus `lead` µs (given with it): a client clock that runs
/// fast cannot push the counter further ahead of this server's own clock,
/// which alone it follows after a data loss. So tokens rise across anything that takes the counter back
/// (a restart from an older snapshot or AOF, a failover to a lagging
/// replica, a flush) as long as the server clock does not go back. Tokens
/// are compared as decimal strings of the same form (no sign, no leading
/// zero), longer meaning larger, so no number is formatted; integers stay
/// below 2^53, where Lua's numbers are exact, for thousands of years.
const MINT: &str = r"
local function clock()
  local now = redis.call('TIME')
  local usec = string.rep('0', 6 - #now[2]) .. now[2]
  local ms = now[1] .. string.sub(usec, 1, 3)
  return tonumber(ms), ms, now[1] .. usec
end
-- Whether token a is above token b (both decimal strings of that form).
local function above(a, b)
  return #a > #b or (#a == #b and a > b)
end
local function mint(counter, at_least, lead)
  local _, _, micros = clock()
  if at_least and above(at_least, micros) then
    -- At most `lead` µs ahead of this server's clock (exact below 2^53).
    local most = tonumber(micros) + (tonumber(lead) or 0)
    if tonumber(at_least) <= most then
      micros = at_least
    else
      micros = string.format('%.0f', most)
    end
  end
  local last = redis.call('GET', counter)
  if last and not above(micros, last) then
    redis.call('INCR', counter)
    return redis.call('GET', counter)
  end
  redis.call('SET', counter, micros)
  return micros
end
";

/// Shared by the scripts that read a waiters' queue. A waiter's entry in
/// the waiters hash is `<ms>:<stay ms>:<ttl ms>:<metadata>`: it was last
/// seen at `<ms>` (server clock) and stays queued until `<ms> + <stay>`;
/// the TTL and metadata are those of its lock, for a hand-over. An entry
/// that does not parse counts as expired.
///
/// `live_head` gives the first waiter whose deadline has not passed, and
/// its entry, after dropping the waiters before it whose deadline has.
const LIVE_HEAD: &str = r"
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
";

/// Shared by the scripts that free a lock or a writer key: `give` hands
/// `key` to the waiter `head` as a *claim*, for its TTL or its stay,
/// whichever is shorter, with a new fencing token and the metadata of its
/// entry, and announces `+<token>:<fence>:<key>`; `drop_free` deletes it
/// and announces `-<key>`. An announcement that fails (an ACL user without
/// rights on the channel) is skipped: the release stands, and waiters find
/// it at their next attempt. Uses `MINT`, so that comes before it.
const GIVE: &str = r"
local function give(key, counter, channel, head, stay, ttl, meta)
  local fence = mint(counter)
  -- A claim, until the grantee takes it up: no longer than it stays.
  local claim = tonumber(stay) < tonumber(ttl) and stay or ttl
  redis.call('SET', key, head .. ':' .. fence .. ':' .. meta, 'PX', claim)
  redis.pcall('PUBLISH', channel, '+' .. head .. ':' .. fence .. ':' .. key)
  return head, fence
end
local function drop_free(key, channel)
  redis.call('DEL', key)
  if channel ~= '' then redis.pcall('PUBLISH', channel, '-' .. key) end
end
";

/// Shared by the scripts that free a lock: gives it to the first queued
/// waiter whose deadline has not passed, with the metadata of its entry,
/// as a *claim*: for its TTL or its stay, whichever is shorter. The grantee
/// takes it up (renews it to its TTL) when it hears of it; a grantee that
/// is gone (killed while queued) keeps the lock from the others for at
/// most its stay, never its TTL. Announces `+<token>:<fence>:<key>` on the
/// channel; waiters whose deadline passed are dropped on the way. Without a
/// live waiter the key is deleted and `-<key>` announced (see `GIVE`).
/// Returns the grantee's token and fencing token, if there was one. Uses
/// `MINT`, `LIVE_HEAD`'s `alive` and `GIVE`, so those come before it in a
/// script.
const HAND_OVER: &str = r"
local function hand_over(key, counter, queue, waiters, channel)
  local now = nil
  while true do
    local head = redis.call('ZPOPMIN', queue)[1]
    if not head then return nil end
    local entry = redis.call('HGET', waiters, head)
    redis.call('HDEL', waiters, head)
    now = now or clock()
    local stay, ttl, meta = string.match(entry or '', '^%d+:(%d+):(%d+):(.*)$')
    if ttl and alive(entry, now) then
      return give(key, counter, channel, head, stay, ttl, meta)
    end
  end
end
local function free(key, counter, queue, waiters, channel)
  -- EXISTS first: on a missing key it costs far less than a read.
  if channel ~= '' and queue and redis.call('EXISTS', queue) == 1 then
    local head, fence = hand_over(key, counter, queue, waiters, channel)
    if head then return head, fence end
  end
  drop_free(key, channel)
  return nil
end
";

/// Shared by the scripts that take a lock or a permit with a queue
/// (`KEYS[1..3]`: the fencing counter, the queue, its waiters; `ARGV[1..5]`:
/// owner token, TTL in ms, metadata, queue mode, how long the queue keys
/// live; see [`ACQUIRE`]; `ARGV[6]`, for a read-write lock only: `r` or
/// `w`, which leads the metadata in the waiter's entry). Uses `LIVE_HEAD`'s
/// `alive`.
///
/// `join` puts this waiter in the queue (or keeps it there) with its entry;
/// `refuse` is the reply of a refused attempt: the given PTTL and the
/// fencing counter as it stands; `leave` takes it out of the queue;
/// `queue_turn` says whether it may take a free lock now. Uses `MINT`'s
/// `clock` too.
const JOIN: &str = r"
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
";

/// Takes every lock key or none, and mints a fencing token; for a single
/// key, keeps waiters in a first-come, first-served queue.
///
/// - `KEYS[1]`: the fencing counter; `KEYS[2]`, `KEYS[3]`: the queue (a
///   sorted set of owner tokens by arrival) and its waiters (a hash of
///   entries, see `LIVE_HEAD`); `KEYS[4..]`: the lock keys.
/// - `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms, `ARGV[3]`: metadata,
///   `ARGV[4]`: queue mode: `""` ignores the queue (multi-key locks,
///   Redlock), `"0"` respects it (a free lock with waiters queued is theirs),
///   `"<ms>"` respects it and, when the lock cannot be had, joins it (or
///   stays in it) for that many more milliseconds; `ARGV[5]`: how long the
///   queue keys live after that, in ms (`<ms>` + 1000); `ARGV[6]`: empty;
///   `ARGV[7]` (optional): the least token to mint (Redlock's proposal),
///   `ARGV[8]` (with it): how far in µs it may lead this server's clock.
///
/// Waiters whose deadline passed are dropped from the head of the queue, so
/// a dead waiter holds the line for at most its last timeout, and one that
/// asks again after its deadline queues at the back, as a newcomer; both queue
/// keys expire a second after the last waiter's timeout, so none outlives
/// its waiters. Keys that are all ours already (a retry after a lost reply,
/// or a lock handed over by a release) are granted again whatever the queue
/// says, with a new fencing token.
///
/// Replies: a bulk string, the fencing token, when granted; when not, an
/// array of the PTTL in ms of the first busy key (-1: it has no TTL; -2: the
/// lock is free but others are queued first) and the fencing counter as it
/// stands (0 when missing), below which no hand-over can be newer than this
/// attempt.
pub(crate) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}{MINT}{LIVE_HEAD}{JOIN}
local function grant()
  local fence = mint(KEYS[1], ARGV[7], ARGV[8])
  local value = token .. ':' .. fence .. ':' .. ARGV[3]
  for i = 4, #KEYS do
    redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
  end
  return fence
end
-- The common case first, in one call: a single free key, nobody queued.
if #KEYS == 4 and redis.call('EXISTS', KEYS[4], queue) == 0 then
  return grant()
end
local busy, mine = nil, true
for i = 4, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if not v then
    mine = false
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
if not mine then
  local refused = queue_turn()
  if refused then return refused end
end
return grant()
"
    ))
});

/// Leaves the queue: a waiter that gave up. A lock (or permit) handed over
/// to it in the meantime is freed again (and handed to the next waiter).
///
/// - `KEYS[1]`: the fencing counter, `KEYS[2]`, `KEYS[3]`: the queue and
///   its waiters, `KEYS[4..]`: the lock keys (a semaphore's every permit).
///   `ARGV[1]`: owner token, `ARGV[2]`: the release channel (`""`: none).
///
/// Replies: how many keys handed over to it were freed.
pub(crate) static DEQUEUE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}{MINT}{LIVE_HEAD}{GIVE}{HAND_OVER}
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local n = 0
for i = 4, #KEYS do
  if owned(KEYS[i], ARGV[1]) then
    free(KEYS[i], KEYS[1], KEYS[2], KEYS[3], ARGV[2])
    n = n + 1
  end
end
return n
"
    ))
});

/// Takes one permit of a semaphore: the first of its permit keys that is
/// free, first come, first served with the other waiters, and mints a
/// fencing token. Each permit is a lock key of its own (value, TTL,
/// renewal, release and hand-over as a lock's), so a permit of a holder
/// that vanished expires on the server's clock like any lock.
///
/// - `KEYS` and `ARGV` as [`ACQUIRE`]'s, where `KEYS[4..]` are the
///   semaphore's permit keys (as many as the caller's permit count) and the
///   queue is the semaphore's.
///
/// A permit already ours (a retry after a lost reply, or one handed over
/// by a release) is granted again with a new fencing token; a free permit
/// is taken only when no live waiter is queued before this one.
///
/// Replies: a bulk string `<fencing token>:<index of the permit>` when
/// granted; when not, [`ACQUIRE`]'s refusal, with the smallest PTTL of the
/// permits (-1: none has a TTL; -2: a permit is free but others are queued
/// first).
pub(crate) static PERMIT_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}{MINT}{LIVE_HEAD}{JOIN}
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
"
    ))
});

/// Shared by the read-write lock's scripts: the read holds.
///
/// `live_readers` counts the read-hold keys in the set `readers` that still
/// exist, drops the others from it, and gives the longest PTTL among them
/// (-1 when one has none). `keep` makes a key live at least `ttl` ms more:
/// the set of read holds outlives every read hold in it.
const READERS: &str = r"
local function live_readers(readers)
  local n, longest = 0, -2
  for _, k in ipairs(redis.call('SMEMBERS', readers)) do
    local pttl = redis.call('PTTL', k)
    if pttl == -2 then
      redis.call('SREM', readers, k)
    else
      n = n + 1
      if pttl == -1 or longest == -1 then longest = -1
      elseif pttl > longest then longest = pttl end
    end
  end
  return n, longest
end
local function keep(key, ttl)
  if redis.call('PTTL', key) < tonumber(ttl) then redis.call('PEXPIRE', key, ttl) end
end
";

/// Takes a read or the write hold of a read-write lock, with writer
/// preference: a reader is let in while no writer holds the lock and no
/// live writer is queued before it (readers queued before it do not stop
/// it); the writer only when no writer and no reader holds it and no live
/// waiter of either kind is queued before it. So a queued writer stops the
/// readers who come after it, and when it releases, every reader queued
/// before the next writer may go in at once. Mints a fencing token for
/// every hold, read or write.
///
/// - `KEYS[1..3]` and `ARGV[1..5]` as [`ACQUIRE`]'s, with the lock's own
///   queue; `KEYS[4]`: the hold's key (a read hold's own key, or the writer
///   key), `KEYS[5]`: the writer key, `KEYS[6]`: the set of read-hold keys;
///   `ARGV[6]`: `r` for a read hold, `w` for the write hold.
///
/// A hold already ours (a retry after a lost reply) is granted again with
/// a new fencing token. A read hold's key joins the set of read holds,
/// which is kept alive as long as its longest-lived member.
///
/// Replies: as [`ACQUIRE`]'s; a refusal carries the writer's PTTL, or the
/// longest PTTL of the read holds a writer waits for, or -2 when others
/// are queued first.
pub(crate) static RW_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}{MINT}{LIVE_HEAD}{JOIN}{READERS}
local hold, writer, readers = KEYS[4], KEYS[5], KEYS[6]
local reading = ARGV[6] == 'r'
local function grant()
  local fence = mint(KEYS[1])
  redis.call('SET', hold, token .. ':' .. fence .. ':' .. ARGV[3], 'PX', ARGV[2])
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
if ours(redis.pcall('GET', hold), token) then return grant() end
if redis.call('EXISTS', writer) == 1 then return wait(redis.call('PTTL', writer)) end
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
local refused = queue_turn()
if refused then return refused end
return grant()
"
    ))
});

/// Renews a read hold: sets its TTL if it is ours and still counted among
/// the read holds (a set that was lost, evicted say, no longer keeps
/// writers out: the hold is lost), and keeps that set alive as long.
///
/// - `KEYS[1]`: the read hold's key, `KEYS[2]`: the set of read holds.
///   `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms.
///
/// Replies: 1 when renewed, 0 when lost (nothing touched).
pub(crate) static READ_RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}{READERS}
if not owned(KEYS[1], ARGV[1]) or redis.call('SISMEMBER', KEYS[2], KEYS[1]) == 0 then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
keep(KEYS[2], ARGV[2])
return 1
"
    ))
});

/// Shared by the read-write lock's releases (after `MINT`, `LIVE_HEAD` and
/// `GIVE`): `hand_to_writer` gives the free writer key to the first live
/// waiter when it is a writer, as a claim (as `HAND_OVER` does for a lock: for
/// its TTL or its stay, whichever is shorter), announced
/// `+<token>:<fence>:<writer key>`; when the first is a reader, or nobody
/// waits, it deletes the writer key (if it is still there) and announces
/// `-<writer key>`, which wakes the waiters: every reader queued before
/// the next writer goes in. Returns the grantee's token and fencing token,
/// if there was one.
const WRITER_HAND: &str = r"
local function hand_to_writer(writer, counter, queue, waiters, channel)
  if channel ~= '' and redis.call('EXISTS', queue) == 1 then
    local now = clock()
    local head, entry = live_head(queue, waiters, now)
    local stay, ttl, meta = string.match(entry or '', '^%d+:(%d+):(%d+):w(.*)$')
    if head and ttl then
      redis.call('ZREM', queue, head)
      redis.call('HDEL', waiters, head)
      return give(writer, counter, channel, head, stay, ttl, meta)
    end
  end
  drop_free(writer, channel)
  return nil
end
";

/// Releases a read hold: deletes its key if it is ours and takes it out of
/// the set of read holds; when no live read hold is left, the lock is free:
/// see `WRITER_HAND`.
///
/// - `KEYS[1]`: the read hold's key, `KEYS[2]`: the set of read holds,
///   `KEYS[3]`: the writer key, `KEYS[4..6]`: the fencing counter, the queue
///   and its waiters. `ARGV[1]`: owner token, `ARGV[2]`: the release channel
///   (`""`: none).
///
/// Replies: 1 when the hold was ours and still counted among the read
/// holds, 0 when it had been lost: its key gone or another's, or left out
/// of the set (a set evicted while the hold's key stayed), since writers no
/// longer saw it (as [`READ_RENEW`] says); after a hand-over, an array of
/// that number, the grantee's owner token and its fencing token (as
/// [`RELEASE`]'s).
pub(crate) static READ_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}{MINT}{LIVE_HEAD}{READERS}{GIVE}{WRITER_HAND}
local n = 0
local counted = redis.call('SREM', KEYS[2], KEYS[1]) == 1
if owned(KEYS[1], ARGV[1]) then
  redis.call('DEL', KEYS[1])
  if counted then n = 1 end
end
if live_readers(KEYS[2]) == 0 and redis.call('EXISTS', KEYS[3]) == 0 then
  local head, fence = hand_to_writer(KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[2])
  if head then return {{n, head, fence}} end
end
return n
"
    ))
});

/// Releases the write hold: if the writer key is ours, the lock is free:
/// see `WRITER_HAND`.
///
/// - `KEYS[1]`: the writer key, `KEYS[2..4]`: the fencing counter, the
///   queue and its waiters. `ARGV[1]`: owner token, `ARGV[2]`: the release
///   channel (`""`: none).
///
/// Replies: as [`READ_RELEASE`]'s.
pub(crate) static WRITE_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}{MINT}{LIVE_HEAD}{GIVE}{WRITER_HAND}
if not owned(KEYS[1], ARGV[1]) then return 0 end
local head, fence = hand_to_writer(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
if head then return {{1, head, fence}} end
return 1
"
    ))
});

/// Leaves the queue of a read-write lock (a waiter that gave up). A writer
/// key handed over to it in the meantime is freed again (see
/// `WRITER_HAND`); otherwise the writer key is announced, so that the
/// waiters it stood before look again.
///
/// - `KEYS[1]`: the writer key, `KEYS[2..4]`: the fencing counter, the
///   queue and its waiters. `ARGV[1]`: owner token, `ARGV[2]`: the release
///   channel (`""`: none).
///
/// Replies: 1 when a writer key handed over to it was freed, else 0.
pub(crate) static RW_DEQUEUE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}{MINT}{LIVE_HEAD}{GIVE}{WRITER_HAND}
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if owned(KEYS[1], ARGV[1]) then
  hand_to_writer(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
  return 1
end
if ARGV[2] ~= '' then redis.pcall('PUBLISH', ARGV[2], '-' .. KEYS[1]) end
return 0
"
    ))
});

/// Redlock: raises a counter to at least a floor after a grant, so the next
/// grant on this instance mints a larger token, records the floor as the
/// fencing token of the lock keys that are ours (keeping their TTL), and
/// takes the lock keys that are missing here (with the TTL): a grant on a
/// bare majority then holds every instance that is free, so one instance
/// that loses its data cannot hand a rival a majority.
///
/// - `KEYS[1]`: the fencing counter; `KEYS[2..]`: the lock keys.
/// - `ARGV[1]`: the floor (the largest token of the grant), `ARGV[2]`: owner
///   token, `ARGV[3]`: metadata, `ARGV[4]`: the TTL in ms.
///
/// Replies: 1 when every lock key is ours here afterwards, 0 when one is
/// someone else's (a rival's attempt holds it for a moment).
pub(crate) static RAISE_FENCE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}
local floor = ARGV[1]
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(floor) then
  redis.call('SET', KEYS[1], floor)
end
local value = ARGV[2] .. ':' .. floor .. ':' .. ARGV[3]
local all = 1
for i = 2, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if ours(v, ARGV[2]) then
    redis.call('SET', KEYS[i], value, 'KEEPTTL')
  elseif v == false then
    redis.call('SET', KEYS[i], value, 'PX', ARGV[4])
  else
    all = 0
  end
end
return all
"
    ))
});

/// Sets the TTL of every lock key, only if all of them are ours; in
/// Redlock mode, puts back the ones that are missing (an instance that lost
/// its data) with our value, and raises the counter to our fencing token.
///
/// - `KEYS`: the lock keys; in Redlock mode, then the fencing counter.
///   `ARGV[1]`: owner token, `ARGV[2]`: TTL in ms; in Redlock mode,
///   `ARGV[3]`: the lock's value (`<token>:<fence>:<metadata>`), `ARGV[4]`:
///   its fencing token.
///
/// Replies: 1 when all were ours (or put back) and got the TTL; 0 when any
/// was someone else's (or, outside Redlock mode, missing), in which case
/// none was touched.
pub(crate) static RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}
local value = ARGV[3]
local n = #KEYS
if value then n = n - 1 end
for i = 1, n do
  local v = redis.pcall('GET', KEYS[i])
  if not ours(v, ARGV[1]) and not (value and v == false) then return 0 end
end
for i = 1, n do
  if redis.call('PEXPIRE', KEYS[i], ARGV[2]) == 0 then
    redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
  end
end
if value and tonumber(redis.call('GET', KEYS[#KEYS]) or '0') < tonumber(ARGV[4]) then
  redis.call('SET', KEYS[#KEYS], ARGV[4])
end
return 1
"
    ))
});

/// Deletes the lock keys that are ours and leaves every other key alone;
/// announces each freed key on the release channel, if one is given, and
/// for a single key with a queue, hands the lock to the first live waiter.
///
/// - `KEYS[1..n]`: the lock keys; with a queue, `KEYS[n+1..n+3]`: the
///   fencing counter, the queue and its waiters. `ARGV[1]`: owner token,
///   `ARGV[2]` (optional): the release channel, `ARGV[3]` (optional): `n`
///   (all the keys when missing).
///
/// Replies: the number of keys deleted (all of them when the lock was held);
/// after a hand-over, an array of that number, the grantee's owner token
/// and its fencing token.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(format!(
        "{OWNED}{MINT}{LIVE_HEAD}{GIVE}{HAND_OVER}
local n_keys = tonumber(ARGV[3] or #KEYS)
local channel = ARGV[2] or ''
local n, head, fence = 0, nil, nil
for i = 1, n_keys do
  if owned(KEYS[i], ARGV[1]) then
    n = n + 1
    -- Without a queue, the three keys after the lock keys are nil.
    head, fence = free(KEYS[i], KEYS[n_keys + 1], KEYS[n_keys + 2], KEYS[n_keys + 3], channel)
  end
end
if head then return {{n, head, fence}} end
return n
"
    ))
});

/// Reads who holds one lock key.
///
/// - `KEYS[1]`: the lock key.
///
/// Replies: an empty array when the key does not exist; otherwise
/// `[value, PTTL in ms]`, where the value is `""` for a key of another type.
pub(crate) static HOLDER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        r"
local v = redis.pcall('GET', KEYS[1])
if not v then return {} end
if type(v) ~= 'string' then v = '' end
return {v, redis.call('PTTL', KEYS[1])}
",
    )
});

/// How an attempt treats the waiters' queue (`ACQUIRE`'s `ARGV[4]` and
/// `ARGV[5]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    /// Multi-key locks and Redlock: no queue.
    Ignore,
    /// `try_lock`: a free lock with waiters queued is theirs.
    Respect,
    /// A waiting `lock`: respect the queue, and join it (or stay in it) for
    /// this long when the lock cannot be had now.
    Join(Duration),
}

/// The acquire script of `keys` for `token`: [`ACQUIRE`] for a lock,
/// [`PERMIT_ACQUIRE`] for one of a semaphore's permits, [`RW_ACQUIRE`] for
/// a read or the write hold.
///
/// `at_least`, for a lock: the least fencing token to mint, and how many
/// µs it may lead a master's own clock (beyond that, the master mints its
/// clock plus that lead). Redlock proposes one token to every master; when
/// they all mint it, the grant leaves them as its write-back would, which
/// is then not needed.
pub(crate) fn acquire(
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
    metadata: &str,
    queue: Queue,
    at_least: Option<(&str, u64)>,
) -> Call {
    // The queue mode, and how long the queue keys outlive this waiter.
    let (mode, keep) = match queue {
        Queue::Ignore => (String::new(), 0),
        Queue::Respect => ("0".to_owned(), 0),
        Queue::Join(d) => {
            let ms = time::millis_ceil(d).max(1);
            (ms.to_string(), ms.saturating_add(1000))
        }
    };
    let script: &'static Lua = match keys.hold {
        Hold::Lock => &ACQUIRE,
        Hold::Permit => &PERMIT_ACQUIRE,
        Hold::Read { .. } | Hold::Write { .. } => &RW_ACQUIRE,
    };
    let mut call = script.call();
    call.key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .key(&*keys.locks)
        .arg(token)
        .arg(ttl_ms)
        .arg(metadata)
        .arg(mode)
        .arg(keep);
    match &keys.hold {
        Hold::Read { writer, readers } => {
            call.key(&**writer).key(readers).arg("r");
        }
        Hold::Write { readers } => {
            call.key(&*keys.locks).key(readers).arg("w");
        }
        Hold::Lock => {
            if let Some((at_least, lead)) = at_least {
                call.arg("").arg(at_least).arg(lead);
            }
        }
        Hold::Permit => {}
    }
    call
}

/// Leaving the queue of `keys` for `token`: [`DEQUEUE`] for single-key
/// locks and semaphores, [`RW_DEQUEUE`] for a read-write lock.
pub(crate) fn dequeue(keys: &LockKeys, token: &str, channel: &str) -> Call {
    if let Some(writer) = keys.writer() {
        return rw_call(&RW_DEQUEUE, keys, writer, token, channel);
    }
    let mut call = DEQUEUE.call();
    call.key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .key(&*keys.locks)
        .arg(token)
        .arg(channel);
    call
}

/// `script` (one of the read-write lock's) with `KEYS`: `writer`, the
/// fencing counter, the queue and its waiters; `ARGV`: `token`, `channel`.
fn rw_call(
    script: &'static Lua,
    keys: &LockKeys,
    writer: &[String],
    token: &str,
    channel: &str,
) -> Call {
    let mut call = script.call();
    call.key(writer)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(token)
        .arg(channel);
    call
}

/// [`RAISE_FENCE`] to `fence` for the grant of `keys` to `token`.
pub(crate) fn raise_fence(
    keys: &LockKeys,
    fence: u64,
    token: &str,
    metadata: &str,
    ttl_ms: u64,
) -> Call {
    let mut call = RAISE_FENCE.call();
    call.key(&keys.fence)
        .key(&*keys.locks)
        .arg(fence)
        .arg(token)
        .arg(metadata)
        .arg(ttl_ms);
    call
}

/// [`RENEW`] of `keys` for `token` ([`READ_RENEW`] for a read hold); in
/// Redlock mode, `repair` is the lock's value and fencing token, to put
/// back where the key is missing.
pub(crate) fn renew(
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
    repair: Option<(&str, u64)>,
) -> Call {
    if let Hold::Read { readers, .. } = &keys.hold {
        let mut call = READ_RENEW.call();
        call.key(&*keys.locks).key(readers).arg(token).arg(ttl_ms);
        return call;
    }
    let mut call = RENEW.call();
    call.key(&*keys.locks).arg(token).arg(ttl_ms);
    if let Some((value, fence)) = repair {
        call.key(&keys.fence).arg(value).arg(fence);
    }
    call
}

/// [`RELEASE`] of `keys` by `token`, announced on `channel` (`""`: none);
/// with `queued`, a single key is handed to its first live waiter.
/// [`READ_RELEASE`] for a read hold, [`WRITE_RELEASE`] for the write hold.
pub(crate) fn release(keys: &LockKeys, token: &str, channel: &str, queued: bool) -> Call {
    match &keys.hold {
        Hold::Read { writer, readers } => {
            let mut call = READ_RELEASE.call();
            call.key(&*keys.locks)
                .key(readers)
                .key(&**writer)
                .key(&keys.fence)
                .key(&keys.queue)
                .key(&keys.waiters)
                .arg(token)
                .arg(channel);
            return call;
        }
        Hold::Write { .. } => return rw_call(&WRITE_RELEASE, keys, &keys.locks, token, channel),
        Hold::Lock | Hold::Permit => {}
    }
    let mut call = RELEASE.call();
    call.key(&*keys.locks);
    if queued {
        call.key(&keys.fence).key(&keys.queue).key(&keys.waiters);
    }
    call.arg(token).arg(channel).arg(keys.locks.len());
    call
}

/// [`RELEASE`] of `keys` by `token` as a plain `EVAL` (no announcement, no
/// hand-over): the clean-up after an acquire whose outcome is unknown, which
/// must not depend on the script cache (a NOSCRIPT reply would silently
/// skip it).
pub(crate) fn release_by_eval(keys: &LockKeys, token: &str) -> Cmd {
    let mut call = RELEASE.call();
    call.key(&*keys.locks).arg(token);
    call.eval()
}

/// [`HOLDER`] of one lock key.
pub(crate) fn holder(lock_key: &str) -> Call {
    let mut call = HOLDER.call();
    call.key(lock_key);
    call
}
