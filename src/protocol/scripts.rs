//! The handle of every Lua script the crate runs, and one typed caller per
//! script that builds its KEYS and ARGV in the order its contract says (the
//! replies are parsed in `replies.rs`).
//!
//! The scripts themselves are Lua files: one per script in `lua/`, opening
//! with its KEYS/ARGV contract and replies, and the helpers several share
//! in `lua/lib/`, each saying what it expects in scope. A script's
//! `-- Helpers:` line names the helpers that come before it; `script!`
//! puts them together at compile time in that order (no build script), and
//! `.ci/lint-lua` lints each script so assembled with luacheck
//! (`lua/.luacheckrc` declares Redis's globals).
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
    ToRedisArgs, Value,
};

use crate::defaults::{ELECTION_LOG_CAP, ELECTION_LOG_KEEP};
use crate::protocol::keys::{Hold, LockKeys};
use crate::time;

/// The script `lua/<name>.lua`, after the helpers it names from `lua/lib/`
/// (in that order, which its `-- Helpers:` line repeats), put together into
/// one [`Lua`] (paths from the crate's root, so that the files under
/// `scripts/` use it too). After a second `;`, more helpers, put inside the
/// script right after its `-- Helpers here:` line (which names them in
/// that order): a script's common case, written before that line, then
/// runs without defining the helpers only its other cases use (defining a
/// function costs a script about a tenth of a µs, every run).
macro_rules! script {
    ($name:literal) => {
        Lua::new(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/protocol/lua/",
            $name,
            ".lua"
        )))
    };
    ($name:literal; $($lib:literal),*) => {
        Lua::new(concat!(
            $(include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/protocol/lua/lib/",
                $lib,
                ".lua"
            )),)*
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol/lua/", $name, ".lua"))
        ))
    };
    ($name:literal; $($lib:literal),*; $($later:literal),+) => {
        Lua::with_helpers_inside(
            concat!($(include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/protocol/lua/lib/",
                $lib,
                ".lua"
            )),)*),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol/lua/", $name, ".lua")),
            concat!($(include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/protocol/lua/lib/",
                $later,
                ".lua"
            )),)*),
        )
    };
}

/// The line of a script after which its later helpers go (see `script!`).
const HELPERS_HERE: &str = "-- Helpers here: ";

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

    /// `before`, then `script` with `later` put right after its `-- Helpers
    /// here:` line (before the script's first line, if it has none: the
    /// unit test below says so).
    fn with_helpers_inside(before: &str, script: &str, later: &str) -> Lua {
        let at = script
            .find(&format!("\n{HELPERS_HERE}"))
            .and_then(|i| {
                let line = i + 1;
                script.get(line..)?.find('\n').map(|end| line + end + 1)
            })
            .unwrap_or(0);
        let (head, tail) = script.split_at_checked(at).unwrap_or(("", script));
        Lua::new([before, head, later, tail].concat())
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
        let reply = con.req_command(&self.command("EVALSHA", &self.lua.sha));
        self.answer(reply, con)
    }

    /// This call's `EVALSHA`, packed: a request written on a connection
    /// whose reply is read later, and given to [`Call::answer`].
    pub(crate) fn request(&self) -> Vec<u8> {
        self.command("EVALSHA", &self.lua.sha).get_packed_command()
    }

    /// The reply to this call's `EVALSHA` (read on `con`), as
    /// [`Call::invoke`] gives it: when NOSCRIPT, the script run again by
    /// its source on `con`.
    pub(crate) fn answer<T: FromRedisValue>(
        &self,
        reply: RedisResult<Value>,
        con: &mut dyn ConnectionLike,
    ) -> RedisResult<T> {
        match reply.and_then(Value::extract_error) {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.eval().query(con)
            }
            other => Ok(redis::from_redis_value(other?)?),
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

/// Takes every lock key or none, and mints a fencing token; for a single
/// key, keeps waiters in a first-come, first-served queue. Its KEYS/ARGV contract and replies open
/// `lua/acquire.lua`.
pub(crate) static ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| script!("acquire"; "mint"; "owned", "live_head", "join", "delay"));

/// Leaves the queue: a waiter that gave up. Its KEYS/ARGV contract and replies open
/// `lua/dequeue.lua`.
pub(crate) static DEQUEUE: LazyLock<Lua> = LazyLock::new(
    || script!("dequeue"; "owned", "mint", "live_head", "publish", "give", "hand_over"),
);

/// Takes one permit of a semaphore, first come, first served with the
/// other waiters, and mints a fencing token. Its KEYS/ARGV contract and replies open
/// `lua/permit_acquire.lua`.
pub(crate) static PERMIT_ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| script!("permit_acquire"; "owned", "mint", "live_head", "join", "delay"));

/// Redlock: raises a counter to at least a floor after a grant, and takes
/// the lock keys that are missing here. Its KEYS/ARGV contract and replies open
/// `lua/raise_fence.lua`.
pub(crate) static RAISE_FENCE: LazyLock<Lua> =
    LazyLock::new(|| script!("raise_fence"; "owned", "mint", "delay"));

/// Sets the TTL of every lock key, only if all of them are ours. Its KEYS/ARGV contract and replies open
/// `lua/renew.lua`.
pub(crate) static RENEW: LazyLock<Lua> =
    LazyLock::new(|| script!("renew"; "owned"; "mint", "delay", "marks"));

/// Deletes the lock keys that are ours; announces them, and hands a single
/// key to the first live waiter. Its KEYS/ARGV contract and replies open
/// `lua/release.lua`.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(
    || script!("release"; "owned", "publish"; "mint", "live_head", "give", "hand_over", "delay"),
);

mod election;
mod guarded;
mod operate;
mod rw;

pub(crate) use election::*;
pub(crate) use guarded::*;
pub(crate) use operate::*;
pub(crate) use rw::*;

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
///
/// `delay_ms`: this holder's lock-delay, recorded with the grant (0: none,
/// and the arguments are as without lock-delay). Every attempt passes the
/// marks, whatever its own delay: nobody is granted a key in its delay.
pub(crate) fn acquire(
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
    metadata: &str,
    queue: Queue,
    at_least: Option<(&str, u64)>,
    delay_ms: u64,
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
        Hold::Lock | Hold::Leader { .. } => &ACQUIRE,
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
        Hold::Permit | Hold::Leader { .. } => {}
    }
    call.key(&*keys.delays);
    if delay_ms > 0 {
        // `ARGV[9]`: the arguments before it, empty where unused.
        while call.args.len() < 8 {
            call.arg("");
        }
        call.arg(delay_ms);
    }
    call
}

/// Leaving the queue of `keys` for `token`: [`DEQUEUE`] for single-key
/// locks and semaphores, [`RW_DEQUEUE`] for a read-write lock.
pub(crate) fn dequeue(keys: &LockKeys, token: &str, channel: &str) -> Call {
    if let Some(writer) = keys.writer() {
        return rw_call(&RW_DEQUEUE, keys, writer, token, channel, false);
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

/// [`RAISE_FENCE`] to `fence` for the grant of `keys` to `token`, whose
/// lock-delay is `delay_ms` (0: none).
pub(crate) fn raise_fence(
    keys: &LockKeys,
    fence: u64,
    token: &str,
    metadata: &str,
    ttl_ms: u64,
    delay_ms: u64,
) -> Call {
    let mut call = RAISE_FENCE.call();
    call.key(&keys.fence)
        .key(&*keys.locks)
        .key(keys.delays_of_each())
        .arg(fence)
        .arg(token)
        .arg(metadata)
        .arg(ttl_ms);
    if delay_ms > 0 {
        call.arg(delay_ms);
    }
    call
}

/// [`RENEW`] of `keys` for `token` ([`READ_RENEW`] for a read hold); in
/// Redlock mode, `repair` is the lock's value and fencing token, to put
/// back where the key is missing. With a lock-delay (`delay_ms` above 0),
/// the lease's new end is recorded in its marks.
pub(crate) fn renew(
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
    repair: Option<(&str, u64)>,
    delay_ms: u64,
) -> Call {
    if let Hold::Read { readers, .. } = &keys.hold {
        let mut call = READ_RENEW.call();
        call.key(&*keys.locks)
            .key(readers)
            .key(&keys.marks)
            .arg(token)
            .arg(ttl_ms);
        if delay_ms > 0 {
            call.key(&*keys.delays).arg(delay_ms);
        }
        return call;
    }
    let mut call = RENEW.call();
    call.key(&*keys.locks).arg(token).arg(ttl_ms).arg(delay_ms);
    if let Some((value, fence)) = repair {
        call.key(&keys.fence).arg(value).arg(fence);
    }
    if delay_ms > 0 {
        call.key(keys.delays_of_each());
    }
    call.key(&keys.marks);
    call
}

/// [`RELEASE`] of `keys` by `token`, announced on `channel` (`""`: none);
/// with `queued`, a single key is handed to its first live waiter.
/// [`READ_RELEASE`] for a read hold, [`WRITE_RELEASE`] for the write hold.
/// With `unmark` (a holder with a lock-delay), the release is a clean one:
/// the marks of the keys it frees are deleted.
pub(crate) fn release(
    keys: &LockKeys,
    token: &str,
    channel: &str,
    queued: bool,
    unmark: bool,
) -> Call {
    match &keys.hold {
        Hold::Read { writer, readers } => {
            let mut call = READ_RELEASE.call();
            call.key(&*keys.locks)
                .key(readers)
                .key(&**writer)
                .key(&keys.fence)
                .key(&keys.queue)
                .key(&keys.waiters)
                .key(&*keys.delays)
                .arg(token)
                .arg(channel)
                .arg(if unmark { "1" } else { "" });
            return call;
        }
        Hold::Write { .. } => {
            return rw_call(&WRITE_RELEASE, keys, &keys.locks, token, channel, unmark)
        }
        Hold::Leader { log } => {
            let mut call = RESIGN.call();
            call.key(&*keys.locks)
                .key(&keys.fence)
                .key(&keys.queue)
                .key(&keys.waiters)
                .key(log)
                .arg(token)
                .arg(channel)
                .arg(ELECTION_LOG_CAP)
                .arg(time::millis_ceil(ELECTION_LOG_KEEP));
            if unmark {
                call.key(&*keys.delays).arg("1");
            }
            return call;
        }
        Hold::Lock | Hold::Permit => {}
    }
    let mut call = RELEASE.call();
    call.key(&*keys.locks);
    if queued {
        call.key(&keys.fence).key(&keys.queue).key(&keys.waiters);
    }
    call.arg(token).arg(channel).arg(keys.locks.len());
    if unmark {
        call.key(keys.delays_of_each()).arg("1");
    }
    call
}

/// [`RELEASE`] of `keys` by `token` as a plain `EVAL` (no announcement, no
/// hand-over): the clean-up after an acquire whose outcome is unknown, which
/// must not depend on the script cache (a NOSCRIPT reply would silently
/// skip it). With `unmark`, the marks a grant may have written go too.
pub(crate) fn release_by_eval(keys: &LockKeys, token: &str, unmark: bool) -> Cmd {
    let mut call = RELEASE.call();
    call.key(&*keys.locks).arg(token);
    if unmark {
        call.key(keys.delays_of_each())
            .arg("")
            .arg(keys.locks.len())
            .arg("1");
    }
    call.eval()
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use super::*;

    /// Each script runs as its file's `-- Helpers:` line says it is put
    /// together (the helpers from `lua/lib/`, then the script), which is how
    /// `.ci/lint-lua` lints it; and every `.lua` file has its handle here.
    #[test]
    fn scripts_are_assembled_as_their_helpers_line_says() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protocol/lua");
        let scripts: [(&str, &Lua); 23] = [
            ("acquire", &ACQUIRE),
            ("dequeue", &DEQUEUE),
            ("permit_acquire", &PERMIT_ACQUIRE),
            ("rw_acquire", &RW_ACQUIRE),
            ("read_renew", &READ_RENEW),
            ("read_release", &READ_RELEASE),
            ("write_release", &WRITE_RELEASE),
            ("rw_dequeue", &RW_DEQUEUE),
            ("raise_fence", &RAISE_FENCE),
            ("renew", &RENEW),
            ("release", &RELEASE),
            ("inspect", &INSPECT),
            ("scan", &SCAN),
            ("break", &BREAK),
            ("resign", &RESIGN),
            ("announce", &ANNOUNCE),
            ("proclaim", &PROCLAIM),
            ("observe", &OBSERVE),
            ("guarded", &GUARDED),
            ("fence", &FENCE),
            ("rw_downgrade", &RW_DOWNGRADE),
            ("prefer", &PREFER),
            ("command_keys", &COMMAND_KEYS),
        ];
        let mut files: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter_map(|f| f.strip_suffix(".lua").map(str::to_owned))
            .collect();
        files.sort();
        let mut names: Vec<&str> = scripts.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        assert_eq!(files, names);
        let helpers = |names: &str| -> String {
            names
                .split_whitespace()
                .filter(|h| *h != "(none)")
                .map(|h| fs::read_to_string(dir.join(format!("lib/{h}.lua"))).unwrap())
                .collect()
        };
        for (name, lua) in scripts {
            let script = fs::read_to_string(dir.join(format!("{name}.lua"))).unwrap();
            let first = script
                .lines()
                .find_map(|l| l.strip_prefix("-- Helpers: "))
                .unwrap_or_else(|| panic!("{name}.lua has no `-- Helpers:` line"));
            let mut assembled = helpers(first);
            // The script, with the helpers of its `-- Helpers here:` line
            // (if any) right after that line.
            for line in script.split_inclusive('\n') {
                assembled += line;
                if let Some(later) = line.strip_prefix(HELPERS_HERE) {
                    assembled += &helpers(later);
                }
            }
            assert_eq!(lua.source, assembled, "{name}.lua");
            assert_eq!(lua.sha, Script::new(&assembled).get_hash(), "{name}.lua");
        }
    }
}
