//! The scripts of an operator's view: a hold read with its waiters, a
//! `SCAN` step on a slot's master, a hold broken (`Locker::locks`,
//! `Locker::break_lock`).

use std::sync::LazyLock;

use super::{Call, Lua};
use crate::defaults::{ELECTION_LOG_CAP, ELECTION_LOG_KEEP};
use crate::protocol::keys::{Hold, LockKeys};
use crate::time;

/// Reads a hold and its live waiters' metadata, for a listing. Its
/// KEYS/ARGV contract and replies open `lua/inspect.lua`.
pub(crate) static INSPECT: LazyLock<Lua> =
    LazyLock::new(|| script!("inspect"; "mint", "live_head", "waiting", "whose"));

/// One `SCAN` step on the master of a slot. Its KEYS/ARGV contract and
/// replies open `lua/scan.lua`.
pub(crate) static SCAN: LazyLock<Lua> = LazyLock::new(|| script!("scan"));

/// Breaks a hold for an operator: marks it, frees it as a release would.
/// Its KEYS/ARGV contract and replies open `lua/break.lua`.
pub(crate) static BREAK: LazyLock<Lua> = LazyLock::new(|| {
    script!("break"; "mint", "live_head", "waiting", "readers", "publish", "give", "hand_over",
        "writer_hand", "delay", "log", "whose")
});

/// [`INSPECT`] of a hold under the prefixes it may be under, the longest
/// first (see `lua/lib/whose.lua`): `under` holds its keys under each (its
/// own key first, the same in each), the caller's own prefix at place
/// `own` (from 1). Reads at most `most` waiters.
pub(crate) fn inspect(under: &[LockKeys], own: usize, most: usize) -> Call {
    let mut call = INSPECT.call();
    if let Some(first) = under.first() {
        call.key(&*first.locks);
    }
    for keys in under {
        call.key(&keys.fence).key(&keys.queue).key(&keys.waiters);
    }
    call.arg(most).arg(own);
    call
}

/// [`SCAN`] from `at` for `glob` on `route`'s server, keys of type `kind`
/// (`string`, `stream`); only holds' keys if `holds`.
pub(crate) fn scan(
    route: &str,
    at: u64,
    glob: &str,
    count: usize,
    holds: bool,
    kind: &str,
) -> Call {
    let mut call = SCAN.call();
    call.key(route).arg(at).arg(glob);
    call.arg(count).arg(u8::from(holds)).arg(kind);
    call
}

/// [`BREAK`] of a hold under the prefixes it may be under, the longest
/// first (see `lua/lib/whose.lua`): `under` holds its keys under each (its
/// own key first, the same in each) with the release channel there (`""`:
/// none), `known` whether that is the one prefix it can be under, `scope`
/// how many of them (the first ones) it may be broken under; for
/// `reason`, its mark kept `keep_ms` past the key's TTL, reading at most
/// `most` waiters.
pub(crate) fn break_hold(
    under: &[(LockKeys, String)],
    known: bool,
    scope: usize,
    reason: &str,
    keep_ms: u64,
    most: usize,
) -> Call {
    let mut call = BREAK.call();
    let Some((first, _)) = under.first() else {
        return call;
    };
    call.key(&*first.locks);
    for (keys, _) in under {
        call.key(&keys.fence)
            .key(&keys.marks)
            .key(&keys.queue)
            .key(&keys.waiters)
            .key(keys.delays_of_each());
    }
    let how = match &first.hold {
        Hold::Read { writer, readers } => {
            call.key(&**writer).key(readers);
            "read"
        }
        Hold::Write { readers } => {
            call.key(&*first.locks).key(readers);
            "write"
        }
        Hold::Leader { log } => {
            call.key(log);
            "leader"
        }
        Hold::Lock | Hold::Permit => "lock",
    };
    call.arg(reason)
        .arg(how)
        .arg(keep_ms)
        .arg(most)
        .arg(under.len())
        .arg(u8::from(known))
        .arg(scope);
    for (_, channel) in under {
        call.arg(channel);
    }
    if matches!(first.hold, Hold::Leader { .. }) {
        call.arg(ELECTION_LOG_CAP)
            .arg(time::millis_ceil(ELECTION_LOG_KEEP));
    }
    call
}
