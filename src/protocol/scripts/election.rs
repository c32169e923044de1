//! The scripts of an election: a resignation, a new leader logged, a
//! value proclaimed, the log observed.

use std::sync::LazyLock;

use super::{Call, Lua};
use crate::defaults::{ELECTION_LOG_CAP, ELECTION_LOG_KEEP};
use crate::protocol::keys::{Hold, LockKeys};
use crate::time;

/// Resigns an election's leadership: a release that hands over and logs
/// the change. Its KEYS/ARGV contract and replies open `lua/resign.lua`.
pub(crate) static RESIGN: LazyLock<Lua> = LazyLock::new(
    || script!("resign"; "owned", "mint", "live_head", "publish", "give", "hand_over", "log", "delay"),
);

/// Logs an election's new leader. Its KEYS/ARGV contract and replies open
/// `lua/announce.lua`.
pub(crate) static ANNOUNCE: LazyLock<Lua> =
    LazyLock::new(|| script!("announce"; "owned", "mint", "log"));

/// Sets an election leader's value. Its KEYS/ARGV contract and replies
/// open `lua/proclaim.lua`.
pub(crate) static PROCLAIM: LazyLock<Lua> = LazyLock::new(|| script!("proclaim"; "owned", "log"));

/// Reads an election's log and leader at once. Its KEYS/ARGV contract and
/// replies open `lua/observe.lua`.
pub(crate) static OBSERVE: LazyLock<Lua> = LazyLock::new(|| script!("observe"));

/// Moves the first live candidate queued with a value to the head of an
/// election's queue, for its leader. Its KEYS/ARGV contract and replies
/// open `lua/prefer.lua`.
pub(crate) static PREFER: LazyLock<Lua> =
    LazyLock::new(|| script!("prefer"; "owned", "mint", "live_head"));

/// [`PREFER`] of the candidate queued with `value`, by the leader `token`
/// of the election `keys`.
pub(crate) fn prefer(keys: &LockKeys, token: &str, value: &str) -> Call {
    let mut call = PREFER.call();
    call.key(&*keys.locks)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(token)
        .arg(value);
    call
}

/// The log of an election's `keys` (empty for any other hold).
fn log_of(keys: &LockKeys) -> &str {
    match &keys.hold {
        Hold::Leader { log } => log,
        _ => "",
    }
}

/// [`ANNOUNCE`] of the leader of the election `keys`, by `token`, whose
/// grant or take-up set the key's TTL to `ttl_ms`.
pub(crate) fn announce(keys: &LockKeys, token: &str, ttl_ms: u64) -> Call {
    let mut call = ANNOUNCE.call();
    call.key(&*keys.locks)
        .key(log_of(keys))
        .arg(token)
        .arg(ELECTION_LOG_CAP)
        .arg(time::millis_ceil(ELECTION_LOG_KEEP))
        .arg(ttl_ms);
    call
}

/// [`PROCLAIM`] of `value` by the leader `token` of the election `keys`.
pub(crate) fn proclaim(keys: &LockKeys, token: &str, value: &str) -> Call {
    let mut call = PROCLAIM.call();
    call.key(&*keys.locks)
        .key(log_of(keys))
        .arg(token)
        .arg(value)
        .arg(ELECTION_LOG_CAP)
        .arg(time::millis_ceil(ELECTION_LOG_KEEP));
    call
}

/// [`OBSERVE`] of the election `keys` after the log entry `after` (`None`:
/// a first look).
pub(crate) fn observe(keys: &LockKeys, after: Option<&str>) -> Call {
    let mut call = OBSERVE.call();
    call.key(&*keys.locks)
        .key(log_of(keys))
        .arg(after.unwrap_or(""));
    call
}
