//! `Builder`, which configures and builds a [`Locker`]; it sits above the
//! locker it builds, and reads its defaults from `defaults.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::{validate_ttl, validate_wait, Config, Topology};
use crate::conn::{self, Connector};
use crate::defaults::{
    DEFAULT_CHECKOUT_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_REPLICA_TIMEOUT, DEFAULT_TTL,
};
use crate::lease::state::{LeaseChange, OnChange};
use crate::locker::Locker;
use crate::protocol::keys::{self, KeySpace};
use crate::Error;

mod host;
use host::default_metadata;

/// Configures a [`Locker`]. Start with [`Locker::builder`], chain the
/// setters (each consumes and returns the builder), finish with
/// [`build`](Builder::build).
///
/// ```no_run
/// # let pool = redmutex::pool("redis://127.0.0.1/")?;
/// use std::time::Duration;
/// let locker = redmutex::Locker::builder(pool)
///     .prefix("billing")
///     .ttl(Duration::from_secs(10))
///     .acquire_timeout(Duration::from_secs(30))
///     .build()?;
/// # let _ = locker;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder {
    instances: Vec<Arc<dyn Connector>>,
    drift: Option<Duration>,
    min_replicas: u64,
    replica_timeout: Duration,
    prefix: Option<String>,
    ttl: Duration,
    acquire_timeout: Option<Duration>,
    backoff: Backoff,
    watchdog: bool,
    max_hold: Option<Duration>,
    metadata: Option<String>,
    audit: bool,
    on_lease_change: Option<OnChange>,
    checkout_timeout: Duration,
    io_timeout: Duration,
    stats: bool,
    clock_ahead: Duration,
    lock_delay: Duration,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("instances", &self.instances.len())
            .field("drift", &self.drift)
            .field("min_replicas", &self.min_replicas)
            .field("replica_timeout", &self.replica_timeout)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("backoff", &self.backoff)
            .field("watchdog", &self.watchdog)
            .field("max_hold", &self.max_hold)
            .field("metadata", &self.metadata)
            .field("audit", &self.audit)
            .field("on_lease_change", &self.on_lease_change.is_some())
            .field("checkout_timeout", &self.checkout_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("stats", &self.stats)
            .field("lock_delay", &self.lock_delay)
            .finish_non_exhaustive()
    }
}

impl Builder {
    pub(crate) fn new(connector: Arc<dyn Connector>) -> Self {
        Builder {
            instances: vec![connector],
            drift: None,
            min_replicas: 0,
            replica_timeout: DEFAULT_REPLICA_TIMEOUT,
            prefix: None,
            ttl: DEFAULT_TTL,
            acquire_timeout: None,
            backoff: Backoff::default(),
            watchdog: true,
            max_hold: None,
            metadata: None,
            audit: false,
            on_lease_change: None,
            checkout_timeout: DEFAULT_CHECKOUT_TIMEOUT,
            io_timeout: DEFAULT_IO_TIMEOUT,
            stats: true,
            clock_ahead: Duration::ZERO,
            lock_delay: Duration::ZERO,
        }
    }

    /// Namespace for this locker's keys: a lock on `key` lives at
    /// `<prefix>:<key>` in Redis, and the fencing counter is shared by the
    /// prefix. Lockers that must exclude each other need the same prefix.
    ///
    /// On a Redis Cluster, a `{` in the prefix must open a non-empty hash
    /// tag closed within it (`{jobs}`: every lock of the prefix then lives
    /// in that tag's slot), or the prefix must have none; `build` refuses
    /// `a{b`, `{}` or `{jobs`, whose keys would not share a slot.
    ///
    /// Defaults to no prefix: keys are used as given.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// // The lock on "deploy" lives at "locks:deploy".
    /// let locker = redmutex::Locker::builder(pool).prefix("locks").build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Lease length. A holder that dies loses the lock after at most this
    /// long; while a guard lives its watchdog renews the lease every `ttl / 3`.
    /// Must be at least 1 ms, longer than its drift allowance (1 % + 2 ms),
    /// and at most [`MAX_TTL`](crate::MAX_TTL).
    ///
    /// Defaults to [`DEFAULT_TTL`] (30 s).
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// // Others take over 5 s after this process dies.
    /// let locker = redmutex::Locker::builder(pool).ttl(Duration::from_secs(5)).build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`Locker::lock`] and [`Locker::lock_all`] wait for a busy
    /// lock before [`Error::Timeout`].
    ///
    /// Defaults to no limit, like a mutex.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .acquire_timeout(Duration::from_secs(10))
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn acquire_timeout(mut self, wait: Duration) -> Self {
        self.acquire_timeout = Some(wait);
        self
    }

    /// Pauses between attempts while waiting, and an optional attempt limit.
    ///
    /// Defaults to [`Backoff::default`]: exponential from 8 ms to 256 ms.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .backoff(redmutex::Backoff::fixed(Duration::from_millis(20)))
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Whether each guard keeps its lease alive with a watchdog thread.
    /// Without it the lease ends `ttl` after acquisition unless you call
    /// [`Guard::extend`](crate::Guard::extend).
    ///
    /// Defaults to `true`.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// // A fixed one-minute lease, bsm/redislock style.
    /// let locker = redmutex::Locker::builder(pool)
    ///     .watchdog(false)
    ///     .ttl(Duration::from_secs(60))
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// The longest a guard's watchdog keeps its lease alive: once `hold` has passed since the
    /// grant, it stops renewing, the lease runs out at its deadline (at most a TTL later), and the
    /// guard becomes lost, with a `warn` log event (target `redmutex::renew`) saying why. A job
    /// that hangs, or a guard never dropped (see `Guard`'s "Resource leaking"), a leadership too,
    /// then cannot keep the lock forever. Defaults to none.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .max_hold(Duration::from_secs(3600)) // no nightly job runs past an hour
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = Some(hold);
        self
    }

    /// Whether this locker records its live figures ([`Locker::stats`],
    /// and the `metrics` feature's reports): a few relaxed atomic adds per
    /// operation, no lock. Off, every figure stays zero. Defaults to on.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let locker = redmutex::Locker::builder(pool).stats(false).build()?;
    /// assert_eq!(locker.stats().grants(), 0);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn stats(mut self, on: bool) -> Self {
        self.stats = on;
        self
    }

    /// Free text stored with every lock this locker takes, shown by
    /// [`Locker::holder`] to whoever wonders who holds a key.
    ///
    /// Defaults to `<hostname>:<process id>`. The host name is read once
    /// per process: on Linux from `/proc/sys/kernel/hostname` (or
    /// `/etc/hostname` without `/proc`), else from the `HOSTNAME` or (on
    /// Windows) `COMPUTERNAME` variable, else from `uname -n` (macOS, the
    /// BSDs); "unknown-host" when none answers.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .metadata("nightly-report on build-03")
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }

    /// Writes every grant and release of this locker to the prefix's audit
    /// trail, beside the breaks, which are always written (see
    /// [`Locker::audit`], which reads each hold's events in the server's
    /// order): a capped Redis stream, `<prefix>:__redmutex__:audit`, of the
    /// latest 10,000 events or so (`XADD ... MAXLEN ~ 10000`). A grant or
    /// release only queues its event, for a thread of the locker to write
    /// (one round trip each, within the checkout and I/O timeouts): a server
    /// slow to take them (on a Cluster, the stream slot's node) never delays
    /// or fails a lock operation. One that fails, or finds 1024 events
    /// waiting, is logged (`warn`, target `redmutex::audit`) and left out,
    /// as are those queued when the process exits ([`Locker::audit`] waits
    /// for this locker's). On Redlock it is on the first instance. Defaults to off.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let locker = redmutex::Locker::builder(pool).audit(true).build()?;
    /// let _guard = locker.lock("payroll")?; // "grant" in the trail
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn audit(mut self, on: bool) -> Self {
        self.audit = on;
        self
    }

    /// Calls `f` with each change of state of every guard's lease (see
    /// [`LeaseState`](crate::LeaseState)), once each, in order, on the
    /// guard's watchdog thread. Keep it quick (set a flag, send on a
    /// channel): while it runs, that guard's lease is not renewed (a call
    /// of a tenth of the TTL or more is logged at `warn`). A panic
    /// in it is caught and logged at `error`; the watchdog goes on. It may
    /// be told a little late: while a renewal is in flight the thread waits
    /// for it (within the checkout and I/O timeouts) before it tells what
    /// happened meanwhile; [`Guard::state`](crate::Guard::state) knows at
    /// once. A change the caller's own call made (a loss found by
    /// [`extend`](crate::Guard::extend) or
    /// [`run_if_held`](crate::Guard::run_if_held)) is told at once, even
    /// when the guard is dropped just after. Nothing is told with
    /// [`watchdog`](Builder::watchdog) off, nor any change after the guard
    /// is released or dropped. Defaults to none.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .on_lease_change(|c| eprintln!("{}: {} -> {}", c.key(), c.from(), c.to()))
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn on_lease_change(mut self, f: impl Fn(&LeaseChange) + Send + Sync + 'static) -> Self {
        self.on_lease_change = Some(OnChange::new(f));
        self
    }

    /// The longest wait for a pooled connection, on every operation (the
    /// pool's own `connection_timeout` is not used: r2d2's default is 30 s).
    ///
    /// Defaults to [`DEFAULT_CHECKOUT_TIMEOUT`] (2 s).
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .checkout_timeout(Duration::from_millis(500))
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn checkout_timeout(mut self, wait: Duration) -> Self {
        self.checkout_timeout = wait;
        self
    }

    /// Read and write timeout the locker puts on each plain redis-rs
    /// connection it takes whose timeouts differ, so that even a pool built
    /// with r2d2's defaults cannot hang a lock call on a stalled server, and
    /// lockers that share one pool each keep their own timeout.
    ///
    /// Defaults to [`DEFAULT_IO_TIMEOUT`] (2 s).
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .io_timeout(Duration::from_millis(500))
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// Adds an independent Redis master: with several, the locker runs
    /// Redlock. Every operation goes to all instances in parallel, and a
    /// lock is granted when a majority (N/2 + 1) took it within the lease's
    /// validity (`ttl` minus the time the requests took minus the drift
    /// allowance). The instances must be independent masters, not replicas
    /// of each other. Each call to an instance is bounded by the checkout and
    /// I/O timeouts, capped in this mode at a tenth of the TTL so that a dead
    /// or hung instance costs little of the lease. An instance whose
    /// connection fails (refused, unreachable, timed out) is then skipped,
    /// counted as failed without being asked, for half a second, and tried again
    /// by the next call after that; each failed try doubles the break, up
    /// to 2 s, and a success ends it. So a dead master costs its timeout
    /// once in a while, not on every lock, renewal and release.
    ///
    /// Defaults to one instance: the pool given to [`Locker::builder`].
    ///
    /// ```no_run
    /// let locker = redmutex::Locker::builder(redmutex::pool("redis://10.0.0.1/")?)
    ///     .instance(redmutex::pool("redis://10.0.0.2/")?)
    ///     .instance(redmutex::pool("redis://10.0.0.3/")?)
    ///     .build()?;
    /// let guard = locker.lock("payments")?; // held on at least 2 of the 3
    /// # drop(guard);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn instance<M>(mut self, pool: r2d2::Pool<M>) -> Self
    where
        M: r2d2::ManageConnection,
        M::Connection: redis::ConnectionLike,
    {
        self.instances.push(conn::connector(pool));
        self
    }

    /// The clock-drift allowance taken off every lease: the local deadline
    /// is `sent + ttl - drift`. Raise it when clocks (or the servers' timers)
    /// may run at different rates.
    ///
    /// Defaults to 1 % of the TTL plus 2 ms, recomputed when `extend`
    /// changes the TTL.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .drift(Duration::from_millis(50))
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    /// Test-only, not part of the API (hidden, may change without notice):
    /// Redlock proposals are made as if this machine's clock ran `ahead`
    /// fast, so that tests can show what a fast client clock does.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let fast = redmutex::Locker::builder(pool)
    ///     .test_clock_ahead(std::time::Duration::from_secs(3600));
    /// # drop(fast);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[doc(hidden)]
    pub fn test_clock_ahead(mut self, ahead: Duration) -> Self {
        self.clock_ahead = ahead;
        self
    }

    /// Lock-delay (Chubby's and Consul's): when a lease of this locker ends
    /// *without* a release (its key expired, or was deleted or taken by
    /// another), nobody (on any locker) is granted that key, permit or
    /// hold until `delay` after the moment the lease was due to end, by the
    /// server's clock; so a holder paused past its lease (GC, swap, a
    /// suspended VM) has its late writes land before the next holder
    /// starts, as long as `delay` covers the pause. A release
    /// ([`Guard::unlock`](crate::Guard::unlock), or the guard's drop), or
    /// an operator's [`Locker::break_lock`] (an override, to unstick a lock;
    /// its holder may write until its next renewal, within a third of its
    /// TTL, tells it: fencing tokens refuse that) frees it at once. Waiters
    /// keep their queue order through the delay, and come back when it ends
    /// (the refusal says when) rather than at their backoff.
    ///
    /// An acquire timeout shorter than the delay gives up before the delay ends (with
    /// [`Error::Timeout`]); give waiters a timeout longer than the delay plus the TTL. With
    /// Redlock each master applies the delay to its own keys. Elections too: a vanished leader
    /// may be paused. Defaults to zero: no delay, as before.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .ttl(Duration::from_secs(10))
    ///     .lock_delay(Duration::from_secs(15)) // covers the longest pause we expect
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Requires `replicas` replicas to acknowledge each acquisition: right
    /// after the acquire script, on the same connection, the locker sends
    /// `WAIT replicas <replica_timeout>`; with fewer acknowledgements it
    /// releases the lock and fails with [`Error::NotReplicated`]. (A `WAIT`
    /// on another connection would confirm nothing: it counts the writes of
    /// its own connection.)
    ///
    /// Renewals (and [`Guard::extend`](crate::Guard::extend)) wait the same
    /// way, and count only once acknowledged: a lease is never longer than
    /// the replicas' copy of the lock. So do an election's announcement of
    /// a new leader and [`Leadership::proclaim`](crate::Leadership::proclaim):
    /// a failover that keeps the lead keeps its value and log too. A stalled replica therefore costs the
    /// holder its lease (told as any loss is), rather than leaving a copy
    /// that a failover would find expired.
    ///
    /// Without it, a failover can promote a replica that never saw the lock
    /// and hand it to a second holder. With it, that takes the loss of every
    /// acknowledging replica too.
    ///
    /// Defaults to 0: no wait.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let locker = redmutex::Locker::builder(pool).min_replicas(1).build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn min_replicas(mut self, replicas: u64) -> Self {
        self.min_replicas = replicas;
        self
    }

    /// How long `WAIT` may wait for the replicas of
    /// [`min_replicas`](Builder::min_replicas). Must be above zero and below
    /// the I/O timeout, since the connection is blocked meanwhile.
    ///
    /// Defaults to [`DEFAULT_REPLICA_TIMEOUT`] (250 ms).
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let locker = redmutex::Locker::builder(pool)
    ///     .min_replicas(1)
    ///     .replica_timeout(Duration::from_millis(100))
    ///     .build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn replica_timeout(mut self, timeout: Duration) -> Self {
        self.replica_timeout = timeout;
        self
    }

    /// Checks the settings and makes the [`Locker`]. Nothing is sent to Redis.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a TTL below 1 ms, not above its drift
    /// allowance, or above [`MAX_TTL`](crate::MAX_TTL); a zero acquire, checkout or I/O
    /// timeout, or any of them, `max_hold` or `lock_delay` above [`MAX_TTL`](crate::MAX_TTL); an empty
    /// prefix, or on a Redis Cluster a prefix whose first `{` opens no
    /// non-empty hash tag closed within it (`a{b`, `{}`); an invalid backoff. (Backoff pauses of any length are
    /// accepted: see [`Backoff`].)
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let bad = redmutex::Locker::builder(pool).ttl(std::time::Duration::ZERO).build();
    /// assert!(matches!(bad, Err(redmutex::Error::InvalidInput(_))));
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn build(self) -> Result<Locker, Error> {
        validate_ttl(self.ttl, self.drift)?;
        if let Some(p) = &self.prefix {
            keys::validate_prefix(p)?;
            if self.instances.iter().any(|i| i.is_cluster()) {
                keys::validate_cluster_prefix(p)?;
            }
        }
        if let Some(wait) = self.acquire_timeout {
            validate_wait("acquire timeout", wait)?;
        }
        validate_wait("checkout timeout", self.checkout_timeout)?;
        validate_wait("io timeout", self.io_timeout)?;
        if let Some(hold) = self.max_hold {
            validate_wait("max hold", hold)?;
        }
        validate_wait("lock delay", self.lock_delay)?;
        if self.checkout_timeout.is_zero() || self.io_timeout.is_zero() {
            return Err(Error::InvalidInput(
                "checkout and io timeouts must be above zero".into(),
            ));
        }
        self.backoff.validate()?;
        if self.min_replicas > 0
            && (self.replica_timeout.is_zero() || self.replica_timeout >= self.io_timeout)
        {
            return Err(Error::InvalidInput(format!(
                "replica timeout {:?} must be above zero and below the io timeout {:?}",
                self.replica_timeout, self.io_timeout
            )));
        }
        Ok(self.build_unchecked())
    }

    /// The locker for these settings, unchecked: used by `build` after its
    /// checks and by `Locker::new`, whose defaults are valid (a unit test
    /// below holds that).
    pub(crate) fn build_unchecked(self) -> Locker {
        let topology = Topology {
            instances: self.instances.len(),
            cluster: self.instances.iter().any(|i| i.is_cluster()),
        };
        let cap = topology.timeout_cap(self.ttl);
        let config = Config {
            topology,
            drift: self.drift,
            min_replicas: self.min_replicas,
            replica_timeout: self.replica_timeout,
            keys: KeySpace::new(self.prefix),
            ttl: self.ttl,
            acquire_timeout: self.acquire_timeout,
            backoff: self.backoff,
            watchdog: self.watchdog,
            max_hold: self.max_hold,
            metadata: self.metadata.unwrap_or_else(default_metadata),
            audit: self.audit,
            on_lease_change: self.on_lease_change,
            checkout_timeout: self.checkout_timeout.min(cap),
            io_timeout: self.io_timeout.min(cap),
            stats: self.stats,
            clock_ahead: self.clock_ahead,
            lock_delay: self.lock_delay,
        };
        Locker::from_parts(self.instances, config)
    }
}
