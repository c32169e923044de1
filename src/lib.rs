#![doc = include_str!("lib.md")]

// The crate's layout, one line per home (API apart from mechanism):
//
// lib.rs              modules, re-exports; no logic (the crate docs are lib.md)
// locker.rs           `Locker`: the API
//   locker/acquire.rs one attempt, the acquire loop (wait, queue, hand-over), a grant's guard
//   locker/stats.rs   `Locker::stats` and `reset_stats`
// semaphore.rs        `Semaphore`: N holders of a name, each hold a `Guard` over one permit key
// rwlock.rs           `RwLock`: readers or one writer of a name, each hold a `Guard` over its key
// election.rs         `Election`: one leader of a name, `Leadership` (a `Guard` over its key),
//                     `Observer` (the log of changes followed)
// guard.rs            `Guard`: a held lock, guarded writes, release on drop
//   guard/lease.rs    its lease as the holder sees it: deadline, lost, held or in doubt
//   guard/downgrade.rs a write hold turned into a read hold
//   guard/counted.rs  what a guard is (`Guard::kind`) and counts for
// info.rs             `LockInfo`, what `Locker::holder` and `locks` report; `LockKind`;
//                     `AuditEntry`, one event of the audit trail; `Leader`, an election's
// operate.rs          `Locker::locks`, `break_lock`, `audit`: what an operator does
// stats/              a locker's live figures:
//   mod.rs            `Stats` and `Durations`, what callers read
//   recorder.rs       the recorder: atomic counters, log-scale histograms; no lock
//   kind.rs           what an event is of (a hold's kind) and a loss's reason
//   export.rs         (feature `metrics`) each event reported to the `metrics` facade
// fence.rs            `fence`: a resource that admits fencing tokens (any Redis connection)
// builder.rs          `Builder`: checks the settings and builds a `Locker` (above it)
//   builder/host.rs   the default metadata: host name and pid
// config.rs           the frozen `Config`, the `Topology` decided once, the duration checks
// defaults.rs         every default and limit (`DEFAULT_*`, `MAX_TTL`, ...); imports nothing
// error.rs            `Error`, with `is_timeout` / `is_connection`
//   error/refusal.rs  a server's refusal read from its words (handshake,
//                     database, credentials)
// open.rs             URLs checked and told in words, the server and password check of `open`,
//                     the Sentinel and Cluster pools
// backoff.rs          `Backoff`, retry delays as pure functions
// raw/                the mechanism, on every instance (asked in parallel), decided by quorum.rs:
//   mod.rs            `RawLock`, a call on one instance, the acquisition and its attempt
//   mutex.rs          a lock's keys, and who holds one
//   permits.rs        a semaphore's permit keys, how many are free, the permit granted
//   rw.rs             a read-write lock's read and write holds, a downgrade
//   election.rs       an election's keys, its candidates, its log (announce, proclaim, observe)
//   renew.rs          a granted hold's renewal, and its expiry
//   release.rs        a granted hold's release, and the waiters it wakes here
//   handed.rs         a lock handed over to a waiter: taken as granted or up
//                     behind its return, and the claim it comes with
//   guarded.rs        a granted hold's guarded write: commands run only while it holds
//   redlock.rs        Redlock only: the proposal, the write-back, the breaker, the fan-out
//   later.rs          Redlock: releases sent again to a master that missed them
//   audit.rs          the audit trail: events written by a thread of their own, read
//                     back in the server's order
//   operate.rs        the SCAN walk of a listing, a hold read or broken
//   model_vs_redis.rs (test) the model walked against the real scripts
// quorum.rs           every majority decision, pure
// conn/
//   mod.rs            the type-erased connector, the spare renewal connection, the
//                     connection lent to the listener
//   nodes.rs          a cluster's nodes: the master of a slot, a connection to one node
//   pool.rs           `pool()`, `pool_with()`, `SocketTimeouts`
//   sent.rs           a request written now, its reply read later (Redlock's lock and unlock)
//   cluster.rs        `ClusterManager`, `ClusterConnection`: a cluster pool's client
//                     (one retry) and the settings its nodes are reached with
//   timeouts.rs       the socket timeouts a call gives its connection (a cluster's
//                     two tries within the call's bound)
// server.rs           what a server must offer (version, scripting), told at first use
// protocol/           what is kept in Redis and said to it:
//   keys.rs           the key layout (lock, counter, queue, waiters, marks, audit, channel)
//                     and key checks
//   named.rs          the holds a listing names, and the names it gives them
//   scripts.rs        every Lua script's handle (EVALSHA, NOSCRIPT -> EVAL) and typed caller
//   scripts/          those of an operator's view, an election, guarded writes, a
//                     read-write lock's holds and downgrade
//   lua/*.lua         every Lua script, opening with its KEYS/ARGV contract and replies
//   lua/lib/*.lua     the helpers scripts share, put before them at compile time
//   replies.rs        every script reply parsed
//   value.rs          the lock value built and parsed
//   slots.rs          cluster hash slots and hash tags
//   commands.rs       a caller's commands for a script: their args, their keys (COMMAND
//                     GETKEYS, asked in one script), the script's replies read back
// lease/              a lease and what keeps it:
//   mod.rs            `Lease`, the local view (deadline, state, renewal serialized)
//   state.rs          `LeaseState`, `LeaseChange`, the callback, the lease's changes of state
//   watchdog.rs       the watchdog that renews a guard's lease
//   workers.rs        the process-wide parked threads watchdogs run on
// wake/               waking waiters on a release:
//   listener.rs       the release listener: states, thread, callback
//   shards.rs         on a cluster, its sharded subscriptions: a connection per master with waiters
//   announce.rs       the announcements' format, delivered to the waiters
//   waiters.rs        the in-process registry of waiters it wakes
// token.rs            owner tokens (never printed)
// time.rs             duration arithmetic
// sync.rs             lock and channel shims: parking_lot/std, or loom under `--cfg loom`
//
// Layers: a file imports its own layer or lower ones, never a higher one
// (`.ci/layers.py` lists each file's imports and flags any that run upward):
//
// 1 leaves      defaults, time, token, sync, error, info, stats: constants, arithmetic,
//               plain types; `defaults`, `sync` and `stats` import nothing of the crate
// 2 mechanism   config, backoff, quorum, protocol/, conn, open, server, lease/, wake/,
//               raw/: what is said to Redis and decided from its replies; reads the
//               leaves and the frozen `Config`, never a handle or the builder
// 3 held        guard: a held lock over raw/ and lease/
// 4 API         locker, semaphore, rwlock, operate, election: the handles (they build each
//               other's guards); fence: the fencing helpers (over protocol/ alone)
// 5 entry       builder: builds a `Locker` from the defaults and the settings given
// 6 root        lib.rs: docs and re-exports only
//
// One import still runs upward, for a stated reason: `Locker::new` and
// `Locker::builder` return a `Builder` (the API's entry point, as r2d2's
// `Pool::builder`). A server's refusal (`auth_reason`, `handshake_unknown`,
// `database_refused`) is read in error/refusal.rs, beside error.rs where its
// errors become ours.

mod backoff;
mod builder;
mod config;
mod conn;
mod defaults;
mod election;
mod error;
pub mod fence;
mod guard;
mod info;
mod lease;
mod locker;
mod open;
mod operate;
mod protocol;
mod quorum;
mod raw;
mod rwlock;
mod semaphore;
mod server;
mod stats;
mod sync;
mod time;
mod token;
mod wake;

pub use backoff::Backoff;
pub use builder::Builder;
pub use conn::{pool, pool_with, ClusterConnection, ClusterManager, SocketTimeouts};
pub use defaults::{
    DEFAULT_CHECKOUT_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_POOL_SIZE, DEFAULT_REPLICA_TIMEOUT,
    DEFAULT_TTL, MAX_TTL,
};
pub use election::{Election, Leadership, Observer};
pub use error::Error;
pub use guard::Guard;
pub use info::{AuditEntry, Leader, LockInfo, LockKind};
pub use lease::state::{LeaseChange, LeaseChangeReason, LeaseState};
pub use lease::workers::{watchdog_threads, WatchdogThreads};
pub use locker::Locker;
pub use open::{cluster_pool, sentinel_pool};
pub use rwlock::RwLock;
pub use semaphore::{Semaphore, MAX_PERMITS};
pub use server::MIN_REDIS_VERSION;
pub use stats::{Durations, Stats};

/// The redis-rs crate this one is built on, for its types in this API
/// (`redis::Client`, `redis::cluster::ClusterClient`,
/// `redis::sentinel::LockedSentinelClient`, `redis::RedisError`) without a
/// matching `redis` dependency of your own.
///
/// ```no_run
/// let client = redmutex::redis::Client::open("redis://127.0.0.1/")?;
/// let locker = redmutex::Locker::new(redmutex::pool_with(client));
/// # let _ = locker;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub use redis;

/// The r2d2 crate whose pools a locker takes, for `r2d2::Pool::builder()`
/// without a matching `r2d2` dependency of your own.
///
/// ```no_run
/// use redmutex::{r2d2, redis};
/// let pool = r2d2::Pool::builder()
///     .max_size(32)
///     .test_on_check_out(false)
///     .connection_customizer(Box::new(redmutex::SocketTimeouts::new(
///         std::time::Duration::from_secs(1),
///     )))
///     .build(redis::Client::open("redis://127.0.0.1/")?)?;
/// let locker = redmutex::Locker::new(pool);
/// # let _ = locker;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub use r2d2;

/// The README's Rust examples, compiled as doctests so they stay true: a
/// README code block that stops compiling fails `cargo test --doc`. They
/// are whole programs (`fn main`), with no hidden lines to show on GitHub.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
