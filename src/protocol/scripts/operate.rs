//! The scripts of an operator's view: a hold read with its waiters, a
//! `SCAN` step on a slot's master, a hold broken (`Locker::locks`,
//! `Locker::break_lock`).

use std::sync::LazyLock;

use super::{Call, Lua};
use crate::protocol::keys::{Hold, LockKeys};

/// Reads a hold and its live waiters' metadata, for a listing. Its
/// KEYS/ARGV contract and replies open `lua/inspect.lua`.
pub(crate) static INSPECT: LazyLock<Lua> =
    LazyLock::new(|| script!("inspect"; "mint", "live_head"));

/// One `SCAN` step on the master of a slot. Its KEYS/ARGV contract and
/// replies open `lua/scan.lua`.
pub(crate) static SCAN: LazyLock<Lua> = LazyLock::new(|| script!("scan"));

/// Breaks a hold for an operator: marks it, frees it as a release would.
/// Its KEYS/ARGV contract and replies open `lua/break.lua`.
pub(crate) static BREAK: LazyLock<Lua> = LazyLock::new(
    || script!("break"; "mint", "live_head", "readers", "publish", "give", "hand_over", "writer_hand"),
);

/// [`INSPECT`] of the hold `keys` (its own key first), reading at most
/// `most` waiters.
pub(crate) fn inspect(keys: &LockKeys, most: usize) -> Call {
    let mut call = INSPECT.call();
    call.key(&*keys.locks)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(most);
    call
}

/// [`SCAN`] from `at` for `glob` on `route`'s server; only holds' keys if `holds`.
pub(crate) fn scan(route: &str, at: u64, glob: &str, count: usize, holds: bool) -> Call {
    let mut call = SCAN.call();
    call.key(route).arg(at).arg(glob);
    call.arg(count).arg(u8::from(holds));
    call
}

/// [`BREAK`] of the hold `keys` (its own key first) for `reason`, the
/// release announced on `channel` (`""`: none), its mark kept `keep_ms`
/// past the key's TTL.
pub(crate) fn break_hold(keys: &LockKeys, reason: &str, channel: &str, keep_ms: u64) -> Call {
    let mut call = BREAK.call();
    call.key(&*keys.locks)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .key(&keys.marks);
    let how = match &keys.hold {
        Hold::Read { writer, readers } => {
            call.key(&**writer).key(readers).key(&*keys.delays);
            "read"
        }
        Hold::Write { readers } => {
            call.key(&*keys.locks).key(readers);
            "write"
        }
        Hold::Lock | Hold::Permit | Hold::Leader { .. } => "lock",
    };
    call.arg(reason).arg(channel).arg(how).arg(keep_ms);
    call
}
