//! The read-write lock's scripts beyond a hold's own acquire, renewal and
//! release: a write hold turned into a read hold.

use std::sync::LazyLock;

use super::{Call, Lua};
use crate::protocol::keys::{Hold, LockKeys};

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
