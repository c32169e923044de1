//! Every default and limit the crate sets: constants a low-level file reads
//! without importing the builder. A leaf: it imports nothing of the crate.

use std::time::Duration;

/// Read and write timeout set on every connection by [`pool`](crate::pool()), and by a
/// locker on connections it uses: 2 s.
///
/// ```
/// assert_eq!(redmutex::DEFAULT_IO_TIMEOUT, std::time::Duration::from_secs(2));
/// ```
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a locker waits to check out a pooled connection: 2 s.
///
/// ```
/// assert_eq!(redmutex::DEFAULT_CHECKOUT_TIMEOUT, std::time::Duration::from_secs(2));
/// ```
pub const DEFAULT_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(2);

/// Most connections [`pool`](crate::pool()) opens to the server: 16.
///
/// ```
/// let pool = redmutex::pool("redis://127.0.0.1/")?;
/// assert_eq!(pool.max_size(), redmutex::DEFAULT_POOL_SIZE);
/// # Ok::<(), redmutex::Error>(())
/// ```
pub const DEFAULT_POOL_SIZE: u32 = 16;

/// How long `WAIT` waits for replicas by default: 250 ms.
///
/// ```
/// assert_eq!(redmutex::DEFAULT_REPLICA_TIMEOUT, std::time::Duration::from_millis(250));
/// ```
pub const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_millis(250);

/// Lease length when none is set: 30 s.
///
/// ```
/// assert_eq!(redmutex::DEFAULT_TTL, std::time::Duration::from_secs(30));
/// ```
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The longest TTL accepted: 2^47 ms, about 4,400 years. Redis itself refuses
/// an expiry that overflows a signed 64-bit millisecond clock.
pub const MAX_TTL: Duration = Duration::from_millis(1 << 47);

/// The backoff a waiting `lock` uses when none is set: exponential from
/// 8 ms to 256 ms (see [`Backoff`]'s `Default`).
pub(crate) const DEFAULT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(8), Duration::from_millis(256));

/// The clock-drift allowance taken off a lease of `ttl` when none is set:
/// 1 % of the TTL plus 2 ms (Redis expires keys with millisecond precision,
/// and clocks run at slightly different rates).
pub(crate) fn default_drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// A release listener keeps one pooled connection for itself: only pools of
/// at least this many connections lend one.
pub(crate) const MIN_POOL_FOR_LISTENER: u32 = 4;

/// A spare connection for renewals is kept only by pools of at least this
/// many connections, so that small pools are left to the application.
pub(crate) const MIN_POOL_FOR_SPARE: u32 = 8;

/// The longest a queued waiter goes without calling the server, whatever
/// its backoff: a longer pause is cut into calls at least this often, each
/// one refreshing the waiter's place (its *stay*) and taking the lock if it
/// is free, without counting as an attempt.
pub(crate) const MAX_QUEUED_PAUSE: Duration = Duration::from_secs(1);

/// The most a waiter's stay keeps for its next call to reach the server
/// (its checkout and I/O timeouts, when they are shorter).
pub(crate) const MAX_STAY_SLACK: Duration = Duration::from_secs(2);

/// Most watchdog threads kept parked for later guards, process-wide.
pub(crate) const MAX_PARKED: usize = 64;

/// How long a parked watchdog thread waits for a job before it ends.
pub(crate) const PARK_LIFETIME: Duration = Duration::from_secs(60);

/// About how many events a prefix's audit trail keeps (`XADD ... MAXLEN ~`):
/// the oldest go first.
pub(crate) const AUDIT_LEN: u64 = 10_000;

/// How many keys one `SCAN` step of a listing looks at (its `COUNT`): each
/// step is one round trip, and keeps the server busy about as long as a
/// `GET` of as many keys would.
pub(crate) const SCAN_COUNT: usize = 500;

/// The most waiters a listing reads per hold.
pub(crate) const MAX_LISTED_WAITERS: usize = 100;

/// How long the mark of a broken hold outlives the broken key's TTL: a
/// renewal of the holder in flight then, or retried, still finds it.
pub(crate) const BREAK_MARK_MARGIN: Duration = Duration::from_secs(5);
/// The most changes an election's log keeps (the oldest are trimmed
/// first): an observer that falls further behind skips the ones trimmed.
pub(crate) const ELECTION_LOG_CAP: u32 = 128;

/// How long an election's log is kept after its latest change: one key per
/// election name, gone a day after it last changed.
pub(crate) const ELECTION_LOG_KEEP: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest an observer's blocking read of an election's log lasts when
/// no leader's lease bounds it sooner.
pub(crate) const OBSERVE_BLOCK: Duration = Duration::from_secs(10);

/// How many times the client of a Cluster pool built here sends a call
/// again by itself: once, to follow a `MOVED` or `ASK` redirection (or
/// after a read that timed out, or a `TRYAGAIN`). redis-rs's default, 16,
/// has a hung master cost 17 I/O timeouts, below any bound of the locker's.
pub(crate) const CLUSTER_RETRIES: u32 = 1;

/// The longest pause before that retry (after `TRYAGAIN`, `CLUSTERDOWN`,
/// `LOADING`); redis-rs's own is 1.28 s or more, growing with each retry.
pub(crate) const CLUSTER_RETRY_WAIT: Duration = Duration::from_millis(20);

/// How long the client of a Cluster pool built here waits to connect to a
/// node, and for each reply of the handshake (two or three), at most: a
/// connection the pool made while a node hung connects to it within a
/// call. Less when a locker's I/O timeout needs it (see `conn/cluster.rs`).
pub(crate) const CLUSTER_CONNECT_TIMEOUT: Duration = Duration::from_millis(600);
