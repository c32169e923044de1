//! The scripts of guarded writes: a caller's commands run while a guard
//! holds its lock, or once a resource admits a fencing token.

use std::sync::LazyLock;

use super::{Call, Lua};
use crate::protocol::keys::{Hold, LockKeys};

/// A guarded write: runs a caller's commands only while a guard holds its
/// lock. Its KEYS/ARGV contract and replies open `lua/guarded.lua`.
pub(crate) static GUARDED: LazyLock<Lua> = LazyLock::new(|| script!("guarded"; "owned", "run"));

/// A resource's fence: admits a fencing token at least the highest seen,
/// and runs a caller's commands then. Its KEYS/ARGV contract and replies
/// open `lua/fence.lua`.
pub(crate) static FENCE: LazyLock<Lua> = LazyLock::new(|| script!("fence"; "run"));

/// The keys a caller's commands name and their names' arities, asked in
/// one exchange. Its ARGV contract and replies open `lua/command_keys.lua`.
pub(crate) static COMMAND_KEYS: LazyLock<Lua> = LazyLock::new(|| script!("command_keys"));

/// [`COMMAND_KEYS`] of `commands` (packed, see `Commands::packed`), whose
/// distinct names are `names`.
pub(crate) fn command_keys(names: &[Vec<u8>], commands: &[Vec<u8>]) -> Call {
    let mut call = COMMAND_KEYS.call();
    call.arg(names.len()).arg(names).arg(commands);
    call
}

/// [`GUARDED`]: `commands` (packed, see `Commands::packed`), naming
/// `command_keys`, run if every key of `keys` is `token`'s; with `once`,
/// a run marker key and its TTL in ms, run at most once however many times
/// the call is sent.
pub(crate) fn guarded(
    keys: &LockKeys,
    token: &str,
    once: Option<(&str, u64)>,
    command_keys: &[Vec<u8>],
    commands: &[Vec<u8>],
) -> Call {
    let mut call = GUARDED.call();
    call.key(&*keys.locks).arg(token).arg(keys.locks.len());
    if let Hold::Read { readers, .. } = &keys.hold {
        call.key(readers).arg("r");
    } else {
        call.arg("");
    }
    once_args(&mut call, once);
    call.key(command_keys).arg(commands);
    call
}

/// [`FENCE`] of `resource_key` for `token`, then `commands` (packed, see
/// `Commands::packed`), naming `command_keys`; with `once`, a run marker
/// key and its TTL in ms, run at most once however many times it is sent.
pub(crate) fn fence(
    resource_key: &str,
    token: u64,
    once: Option<(&str, u64)>,
    command_keys: &[Vec<u8>],
    commands: &[Vec<u8>],
) -> Call {
    let mut call = FENCE.call();
    call.key(resource_key).arg(token.to_string());
    once_args(&mut call, once);
    call.key(command_keys).arg(commands);
    call
}

/// The run marker of `once` (its key and TTL in ms) as the scripts take it,
/// or an empty argument without one.
fn once_args(call: &mut Call, once: Option<(&str, u64)>) {
    match once {
        Some((marker, ttl_ms)) => {
            call.key(marker).arg(ttl_ms);
        }
        None => {
            call.arg("");
        }
    }
}
