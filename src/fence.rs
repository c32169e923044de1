//! Fencing helpers: a resource that refuses a stale holder's writes.
//!
//! A lease-based lock cannot stop a holder that pauses past its lease
//! (a GC pause, swap, a suspended VM): it wakes up still believing it holds
//! the lock, while another holder has it. Only the resource it writes to
//! can refuse it, by the holder's [fencing token](crate::Guard::fencing_token):
//! every grant of a key carries a token greater than every earlier grant's,
//! so the resource keeps the highest token it has seen and refuses a lower
//! one. This is Google's Chubby sequencers and Kleppmann's fencing tokens.
//!
//! - **Writes to the lock's own Redis**: use
//!   [`Guard::run_if_held`](crate::Guard::run_if_held), which checks the
//!   lock itself, atomically with the writes.
//! - **Another Redis** (the resource's own server): [`admit`] records and
//!   checks a token under a key of your choosing, and [`admit_and_run`]
//!   runs your commands only when the token is admitted, in one script.
//! - **A SQL database**: keep the token in the row (or a row per
//!   resource) and make each write conditional on it, in the same
//!   statement:
//!
//!   ```sql
//!   UPDATE accounts SET balance = ?1, fence = ?2 WHERE id = ?3 AND fence <= ?2
//!   ```
//!
//!   An update count of 0 is a stale holder's write, refused. The example
//!   `examples/fence_sqlite.rs` runs it on SQLite with a paused holder
//!   (`cargo run --example fence_sqlite`).
//!
//! A token is admitted when it is *at least* the highest seen: one holder
//! writes many times with its one token. Tokens of one lock key (and one
//! locker prefix) compare; tokens of different keys do not (on a Cluster,
//! keys in different hash slots have counters of their own). So fence one
//! resource with one lock name.
//!
//! The fence key keeps no TTL: a fence that expired would let any stale
//! token in again. Delete it only with the resource.

use redis::{ConnectionLike, Pipeline, Value};

use crate::protocol::commands::{self, Commands};
use crate::protocol::keys::KeySpace;
use crate::protocol::scripts;
use crate::token::Token;
use crate::Error;

/// How long a fenced run's marker lives on a Cluster: past the resends of a
/// redis-rs Cluster connection (16 by default, each after a read timeout
/// of the caller's choosing, which this cannot see).
const RUN_MARKER_TTL_MS: u64 = 60_000;

/// Admits `token` to the resource fenced by `resource_key`, on any Redis
/// connection (the resource's own server, not necessarily the lock's):
/// `true`, and recorded as the highest seen, when it is at least the
/// highest token seen there (or the first); `false` for a stale one,
/// which changes nothing. One round trip (one script); it blocks as long
/// as `conn` lets it (a connection with no read timeout blocks on a hung
/// server: set one).
///
/// The key holds the highest token as a decimal string, with no TTL.
/// Tokens compare exactly over the whole `u64` range.
///
/// Admitting does not make the writes that follow safe by itself: a
/// holder may pause between `admit` and its write. Write in the same
/// step: [`admit_and_run`] for a Redis resource, a conditional `UPDATE`
/// for a database (see the [module docs](self)).
///
/// # Errors
///
/// - [`Error::InvalidInput`] when `resource_key` holds something other than
///   a token (another type, or a string that is not a decimal number):
///   nothing is changed;
/// - [`Error::Redis`] when the server fails or cannot run scripts.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// # let resource = redmutex::redis::Client::open("redis://resource.internal/")?;
/// let guard = locker.lock("exports")?;
/// let mut conn = resource.get_connection()?;
/// if !redmutex::fence::admit(&mut conn, "exports:fence", guard.fencing_token())? {
///     return Err("a newer holder has written: stop".into());
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn admit(
    conn: &mut impl ConnectionLike,
    resource_key: &str,
    token: u64,
) -> Result<bool, Error> {
    match fenced(conn, resource_key, token, &redis::pipe()) {
        Ok(_) => Ok(true),
        Err(Error::Lost { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// As [`admit`], and when `token` is admitted, runs `commands` in the same
/// script, so that no newer holder can be admitted in between: a stale
/// holder's commands never run. Returns every command's reply, in order.
/// Two round trips: one to learn the commands' keys (a script that asks
/// `COMMAND GETKEYS` of each command and replies once, however many the
/// commands; skipped for an empty pipeline), then the script: on a hung
/// server, at most two of `conn`'s read timeouts, whatever the pipeline's
/// length.
///
/// The commands are run as [`Guard::run_if_held`](crate::Guard::run_if_held)
/// runs them: their keys declared to the script, an unknown command or a
/// wrong number of arguments refused before anything runs, and the first
/// error reply ending the run (**the commands before it ran and stay
/// applied**: scripts do not roll back; the token is recorded). The
/// pipeline's `atomic` flag changes nothing; the replies of commands
/// marked `ignore()` are left out. On a Redis Cluster the
/// commands' keys and `resource_key` must share a hash slot (hash tags:
/// `{exports}:fence`, `{exports}:rows`), else the server refuses the
/// script (`CROSSSLOT`) and nothing runs. A Cluster connection sends the
/// script again when its reply is late (after each read timeout): the
/// script then marks its run (a key `__redmutex__:run:{..}:..` in that
/// slot, for a minute), so a resend runs nothing and the commands run once
/// at most; such a call returns a timeout error.
///
/// # Errors
///
/// - [`Error::Lost`] (with `key` the resource key) when `token` is stale:
///   a newer holder was admitted, nothing ran;
/// - [`Error::Redis`] with the server's error when a command replied with
///   one (the commands before it ran), or when the server fails;
/// - [`Error::InvalidInput`] as [`admit`], and for an unknown command, a
///   wrong number of arguments, a command that names `resource_key`
///   (deleting or lowering the fence would let stale tokens in) or one
///   that touches every key (`FLUSHDB`, `FLUSHALL`, `SWAPDB`): nothing
///   ran.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// # let resource = redmutex::redis::Client::open("redis://resource.internal/")?;
/// let guard = locker.lock("exports")?;
/// let mut conn = resource.get_connection()?;
/// let mut writes = redmutex::redis::pipe();
/// writes.hset("{exports}:rows", "row-17", "done");
/// match redmutex::fence::admit_and_run(&mut conn, "{exports}:fence", guard.fencing_token(), &writes) {
///     Ok(_) => println!("written under token {}", guard.fencing_token()),
///     Err(redmutex::Error::Lost { .. }) => eprintln!("stale holder: refused, nothing written"),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn admit_and_run(
    conn: &mut impl ConnectionLike,
    resource_key: &str,
    token: u64,
    commands: &Pipeline,
) -> Result<Vec<Value>, Error> {
    fenced(conn, resource_key, token, commands)
}

/// The fence script for `token` with `pipe`'s commands: their replies, or
/// [`Error::Lost`] for a stale token.
fn fenced(
    conn: &mut dyn ConnectionLike,
    resource_key: &str,
    token: u64,
    pipe: &Pipeline,
) -> Result<Vec<Value>, Error> {
    let commands = Commands::of(pipe)?;
    let packed = commands.packed();
    let keys = if commands.is_empty() {
        Vec::new()
    } else {
        commands.keys(conn, &packed)?
    };
    // A command that deleted or lowered the fence would let a stale token
    // in again.
    if keys.iter().any(|k| k[..] == *resource_key.as_bytes()) {
        return Err(Error::InvalidInput(format!(
            "a fenced command names the fence key {resource_key:?}: it may not touch it"
        )));
    }
    // A Cluster connection (the one kind that takes no pipeline) sends the
    // script again when its reply is late: a run marker makes a resend run
    // nothing. Admitting alone is idempotent, and needs none.
    let marker = if conn.supports_pipelining() || commands.is_empty() {
        None
    } else {
        Some(KeySpace::fence_run_marker(resource_key, &Token::key_id()?))
    };
    let once = marker.as_deref().map(|m| (m, RUN_MARKER_TTL_MS));
    let call = scripts::fence(resource_key, token, once, &keys, &packed);
    match commands::read_run(call.invoke::<Value>(conn)?)? {
        Ok(replies) => Ok(commands.kept_replies(replies)),
        Err(3) => Err(Error::Redis(
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the fenced run's reply timed out: its commands ran once, \
                 the request sent again ran nothing",
            )
            .into(),
        )),
        Err(0) => Err(Error::Lost {
            key: resource_key.to_owned(),
        }),
        Err(_) => Err(Error::InvalidInput(format!(
            "fence key {resource_key:?} holds something other than a fencing token"
        ))),
    }
}
