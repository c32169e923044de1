//! The read-write lock's scripts: the handles of its holds' acquire,
//! renewal, release and dequeue (their callers in `scripts.rs` choose
//! them by the hold, as they do for every primitive), and a write hold
//! turned into a read hold.

use std::sync::LazyLock;

use super::{Call, Lua};
use crate::protocol::keys::{Hold, LockKeys};

/// Takes a read or the write hold of a read-write lock, with writer
/// preference, and mints a fencing token. Its KEYS/ARGV contract and replies open
/// `lua/rw_acquire.lua`.
pub(crate) static RW_ACQUIRE: LazyLock<Lua> = LazyLock::new(
    || script!("rw_acquire"; "owned", "mint", "live_head", "join", "readers", "delay"),
);

/// Renews a read hold. Its KEYS/ARGV contract and replies open
/// `lua/read_renew.lua`.
pub(crate) static READ_RENEW: LazyLock<Lua> =
    LazyLock::new(|| script!("read_renew"; "owned", "readers", "mint", "delay", "marks"));

/// Releases a read hold; the last one frees the writer key. Its KEYS/ARGV contract and replies open
/// `lua/read_release.lua`.
pub(crate) static READ_RELEASE: LazyLock<Lua> = LazyLock::new(
    || script!("read_release"; "owned", "mint", "live_head", "readers", "publish", "give", "writer_hand", "delay"),
);

/// Releases the write hold. Its KEYS/ARGV contract and replies open
/// `lua/write_release.lua`.
pub(crate) static WRITE_RELEASE: LazyLock<Lua> = LazyLock::new(
    || script!("write_release"; "owned", "mint", "live_head", "publish", "give", "writer_hand", "delay"),
);

/// Leaves the queue of a read-write lock (a waiter that gave up). Its KEYS/ARGV contract and replies open
/// `lua/rw_dequeue.lua`.
pub(crate) static RW_DEQUEUE: LazyLock<Lua> = LazyLock::new(
    || script!("rw_dequeue"; "owned", "mint", "live_head", "publish", "give", "writer_hand"),
);

/// `script` (one of the read-write lock's) with `KEYS`: `writer`, the
/// fencing counter, the queue and its waiters; `ARGV`: `token`, `channel`;
/// with `unmark`, `KEYS[5]` the lock-delay marks and `ARGV[3]` `1`.
pub(super) fn rw_call(
    script: &'static Lua,
    keys: &LockKeys,
    writer: &[String],
    token: &str,
    channel: &str,
    unmark: bool,
) -> Call {
    let mut call = script.call();
    call.key(writer)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(token)
        .arg(channel);
    if unmark {
        call.key(&*keys.delays).arg("1");
    }
    call
}

/// Turns the write hold into a read hold in one step. Its KEYS/ARGV
/// contract and replies open `lua/rw_downgrade.lua`.
pub(crate) static RW_DOWNGRADE: LazyLock<Lua> = LazyLock::new(
    || script!("rw_downgrade"; "owned", "mint", "readers", "publish", "delay", "marks"),
);

/// [`RW_DOWNGRADE`] of the write hold `write` (owned by `token`) into the
/// read hold `read` (owned by `read_token`) for `ttl_ms`, the release
/// channel `channel` (`""`: none) told; with a lock-delay (`delay_ms` above
/// 0) the marks follow. `None` when `write` is no write hold or `read` no
/// read hold.
pub(crate) fn downgrade(
    write: &LockKeys,
    token: &str,
    read: &LockKeys,
    read_token: &str,
    ttl_ms: u64,
    channel: &str,
    delay_ms: u64,
) -> Option<Call> {
    let (Hold::Write { readers }, Hold::Read { .. }) = (&write.hold, &read.hold) else {
        return None;
    };
    let mut call = RW_DOWNGRADE.call();
    call.key(&*write.locks)
        .key(&*read.locks)
        .key(readers)
        .key(&write.fence)
        .key(&write.queue)
        .key(&*write.delays)
        .key(&write.marks)
        .arg(token)
        .arg(read_token)
        .arg(ttl_ms)
        .arg(channel)
        .arg(delay_ms);
    Some(call)
}
