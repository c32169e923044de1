//! `Locker`: the handle users clone around, and the one acquire loop.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use r2d2::{ManageConnection, Pool};
use redis::ConnectionLike;

use crate::backoff::jitter_seed;
use crate::config::{
    validate_wait, waiter_stay, Builder, Config, DEFAULT_IO_TIMEOUT, MAX_QUEUED_PAUSE, MAX_TTL,
};
use crate::conn::{self, Connector};
use crate::guard::Guard;
use crate::info::LockInfo;
use crate::lease::Lease;
use crate::open;
use crate::raw::{Acquisition, Outcome, Queue, RawLock};
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::time;
use crate::Error;

/// Takes distributed locks: on one Redis server, on the master a group of
/// Sentinels names, on a Redis Cluster, or on several independent masters
/// by majority (Redlock).
///
/// Cheap to clone (an `Arc` inside); clones share the pool and settings.
/// Lockers exclude each other when they use the same server and prefix,
/// whether they live in one process or on many machines.
///
/// Keys are any string type (`&str`, `String`, `&String`, `Cow<str>`), and
/// the multi-key calls take any list of them: a slice, a `Vec`, an array,
/// an iterator.
///
/// Locks are not reentrant: a second `try_lock` of a key this locker already
/// holds returns `None`, and a second `lock` waits for the first guard, like
/// `std::sync::Mutex` (so a thread that locks a key twice waits for itself
/// until its acquire timeout).
///
/// ```no_run
/// let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let guard = locker.lock("nightly-report")?;
/// // ... only one process on any host runs this at a time ...
/// guard.unlock()?; // or let it drop
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Locker {
    shared: Arc<RawLock>,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Conn<'a>(&'a dyn Connector);
        impl fmt::Debug for Conn<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.describe(f)
            }
        }
        let instances: Vec<Conn<'_>> = self
            .shared
            .instances()
            .iter()
            .map(|c| Conn(c.as_ref()))
            .collect();
        f.debug_struct("Locker")
            .field("config", &self.shared.config)
            .field("instances", &instances)
            .finish()
    }
}

impl Locker {
    /// A locker with default settings over `pool` (see [`Builder`] for them).
    ///
    /// Any r2d2 pool of redis-rs connections works; [`pool`](crate::pool())
    /// builds one with the settings a lock needs. A pool built with r2d2's
    /// defaults works too, at a cost: r2d2 pings every connection at checkout
    /// (a full extra round trip per lock operation), and that ping runs
    /// before the locker can give the connection a read timeout, so on a
    /// stalled server a connection this locker has not used yet can hang the
    /// checkout. Turn `test_on_check_out` off and add
    /// [`SocketTimeouts`](crate::SocketTimeouts).
    ///
    /// ```no_run
    /// let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let locker = redmutex::Locker::new(pool);
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn new<M>(pool: Pool<M>) -> Locker
    where
        M: ManageConnection,
        M::Connection: ConnectionLike,
    {
        Builder::new(conn::connector(pool)).build_unchecked()
    }

    /// A [`Builder`] to configure a locker over `pool`.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let locker = redmutex::Locker::builder(pool).prefix("jobs").build()?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn builder<M>(pool: Pool<M>) -> Builder
    where
        M: ManageConnection,
        M::Connection: ConnectionLike,
    {
        Builder::new(conn::connector(pool))
    }

    /// `Locker::new(redmutex::pool(url)?)`: default settings over a pool
    /// made for locking, after one connection that checks the password.
    ///
    /// That connection (a `PING`, then closed) returns within the I/O
    /// timeout, [`DEFAULT_IO_TIMEOUT`](crate::DEFAULT_IO_TIMEOUT), host
    /// name lookup included (it runs on a thread of its own, which a server
    /// that does not answer may keep a few timeouts longer); a server
    /// that cannot be reached or does not answer within it does not fail
    /// the call (it may come up later, and lock calls say so meanwhile), but
    /// a refused password does, at once. For Sentinel use
    /// [`Locker::open_sentinel`], for a Cluster [`Locker::open_cluster`],
    /// for several independent masters (Redlock) [`Builder::instance`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidUrl`] when `url` is not a valid Redis URL (saying
    /// which part is wrong), is TLS without the `tls` feature, names
    /// Sentinel or a Cluster, or a database the server does not have;
    /// [`Error::Auth`] when the server refuses the password, or requires
    /// one that `url` lacks; [`Error::Unsupported`] when it does not know
    /// `HELLO` (which `protocol=resp3` needs).
    ///
    /// ```no_run
    /// let locker = redmutex::Locker::open("redis://127.0.0.1:6379/")?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn open(url: &str) -> Result<Locker, Error> {
        // The pool first: with the `tls` feature it installs the crypto
        // provider the check's connection needs.
        let client = open::client(url)?;
        let pool = conn::pool_with(client.clone());
        open::check_credentials(&client, DEFAULT_IO_TIMEOUT)?;
        Ok(Locker::new(pool))
    }

    /// A locker with default settings on the master that the Redis
    /// Sentinels at `sentinels` (their own URLs) name `master`:
    /// `Locker::new(redmutex::sentinel_pool(sentinels, master)?)`. After a
    /// failover new connections reach the new master; see the crate docs'
    /// "Topologies and what they promise" for what a failover can cost, and
    /// [`Builder::min_replicas`].
    ///
    /// # Errors
    ///
    /// As [`sentinel_pool`](crate::sentinel_pool). Nothing is sent yet.
    ///
    /// ```no_run
    /// let locker = redmutex::Locker::open_sentinel(
    ///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
    ///     "mymaster",
    /// )?;
    /// let _guard = locker.lock("nightly-report")?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn open_sentinel<I>(sentinels: I, master: &str) -> Result<Locker, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Ok(Locker::new(open::sentinel_pool(sentinels, master)?))
    }

    /// A locker with default settings on the Redis Cluster that `nodes`
    /// (some of its nodes' URLs) belong to:
    /// `Locker::new(redmutex::cluster_pool(nodes)?)`. The keys of one
    /// [`lock_all`](Locker::lock_all) must share a hash slot (use hash
    /// tags: `{order42}:a`, `{order42}:b`).
    ///
    /// # Errors
    ///
    /// As [`cluster_pool`](crate::cluster_pool). Nothing is sent yet.
    ///
    /// ```no_run
    /// let locker = redmutex::Locker::open_cluster([
    ///     "redis://10.0.0.1:7000/",
    ///     "redis://10.0.0.2:7000/",
    ///     "redis://10.0.0.3:7000/",
    /// ])?;
    /// let _guard = locker.lock_all(&["{order42}:stock", "{order42}:invoice"])?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn open_cluster<I>(nodes: I) -> Result<Locker, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Ok(Locker::new(open::cluster_pool(nodes)?))
    }

    pub(crate) fn from_parts(instances: Vec<Arc<dyn Connector>>, config: Config) -> Locker {
        Locker {
            shared: Arc::new(RawLock::new(instances, config)),
        }
    }

    /// Blocks until the lock on `key` is ours, or until the builder's
    /// `acquire_timeout` passes (by default it never does, like a mutex).
    ///
    /// While waiting it retries with the builder's [`Backoff`](crate::Backoff),
    /// and at once when a guard of this locker is released.
    ///
    /// # Errors
    ///
    /// - [`Error::Timeout`] when the acquire timeout or the backoff's attempt
    ///   limit is reached;
    /// - [`Error::InvalidInput`] for an empty or reserved key;
    /// - [`Error::Redis`], [`Error::Pool`] when Redis fails or cannot be
    ///   reached (returned at once, not retried);
    /// - [`Error::Thread`] when the watchdog thread cannot start.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let _guard = locker.lock("nightly-report")?;
    /// // held until `_guard` drops, renewed meanwhile by its watchdog
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the lock is held only while the guard lives: dropping it releases the lock"]
    pub fn lock(&self, key: impl AsRef<str>) -> Result<Guard, Error> {
        self.acquire_waiting(&[key.as_ref()], self.shared.config.acquire_timeout, None)
    }

    /// Like [`lock`](Locker::lock), but waits at most `wait` for this call.
    ///
    /// # Errors
    ///
    /// As [`lock`](Locker::lock); [`Error::InvalidInput`] as well when `wait`
    /// is above [`MAX_TTL`](crate::MAX_TTL).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// match locker.lock_timeout("invoice-42", Duration::from_millis(500)) {
    ///     Ok(_guard) => println!("ours"),
    ///     Err(redmutex::Error::Timeout { .. }) => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the lock is held only while the guard lives: dropping it releases the lock"]
    pub fn lock_timeout(&self, key: impl AsRef<str>, wait: Duration) -> Result<Guard, Error> {
        validate_wait("wait", wait)?;
        self.acquire_waiting(&[key.as_ref()], Some(wait), None)
    }

    /// Like [`lock`](Locker::lock) (waiting at most `wait` when given, else
    /// as the builder says), but gives up as soon as `stop` is true: it is
    /// checked after every attempt, so within one backoff pause (256 ms by
    /// default) of being set. Giving up leaves nothing behind in Redis: the
    /// waiter leaves the queue, and a lock handed to it meanwhile is handed
    /// on. For a waiter that a signal handler or another thread may call
    /// off.
    ///
    /// # Errors
    ///
    /// As [`lock_timeout`](Locker::lock_timeout); [`Error::Cancelled`] once
    /// `stop` is seen true.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::sync::atomic::AtomicBool;
    /// static STOP: AtomicBool = AtomicBool::new(false); // set by a signal handler
    /// match locker.lock_or_stop("backup", None, &STOP) {
    ///     Ok(_guard) => { /* the backup */ }
    ///     Err(redmutex::Error::Cancelled { .. }) => return Ok(()), // asked to quit
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the lock is held only while the guard lives: dropping it releases the lock"]
    pub fn lock_or_stop(
        &self,
        key: impl AsRef<str>,
        wait: Option<Duration>,
        stop: &AtomicBool,
    ) -> Result<Guard, Error> {
        let wait = self.wait_or_default(wait)?;
        self.acquire_waiting(&[key.as_ref()], wait, Some(stop))
    }

    /// One attempt: the lock on `key` if it is free now, `None` if someone
    /// holds it (including this locker: locks are not reentrant). One round
    /// trip; never waits for the lock.
    ///
    /// Bind the guard: `locker.try_lock(key)?;` alone drops it, and so
    /// releases the lock, at once, and no compiler warning can see a guard
    /// inside an `Option`.
    ///
    /// # Errors
    ///
    /// As [`lock`](Locker::lock), without [`Error::Timeout`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let Some(_guard) = locker.try_lock("nightly-report")? else {
    ///     println!("another host is already running the report");
    ///     return Ok(());
    /// };
    /// // run the report
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the lock is held only while the guard lives: dropping it releases the lock"]
    pub fn try_lock(&self, key: impl AsRef<str>) -> Result<Option<Guard>, Error> {
        self.try_acquire(&[key.as_ref()])
    }

    /// Blocks until every key in `keys` is ours at once, like
    /// [`lock`](Locker::lock). All or nothing: one script takes every key or
    /// none, so no key is ever held without the others, not even for an
    /// instant, and two callers locking overlapping sets cannot deadlock.
    ///
    /// # Errors
    ///
    /// As [`lock`](Locker::lock); [`Error::InvalidInput`] as well for an
    /// empty list or a key given twice.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// // Move stock between two warehouses: both or neither.
    /// let guard = locker.lock_all(&["stock:berlin", "stock:lyon"])?;
    /// assert_eq!(guard.keys(), ["stock:berlin", "stock:lyon"]);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the lock is held only while the guard lives: dropping it releases the lock"]
    pub fn lock_all<I>(&self, keys: I) -> Result<Guard, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        with_keys(keys, |keys| {
            self.acquire_waiting(keys, self.shared.config.acquire_timeout, None)
        })
    }

    /// Like [`lock_all`](Locker::lock_all), but waits at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Locker::lock_all) and [`lock_timeout`](Locker::lock_timeout).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let guard = locker.lock_all_timeout(&["a", "b"], Duration::from_secs(1))?;
    /// # drop(guard);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the lock is held only while the guard lives: dropping it releases the lock"]
    pub fn lock_all_timeout<I>(&self, keys: I, wait: Duration) -> Result<Guard, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        validate_wait("wait", wait)?;
        with_keys(keys, |keys| self.acquire_waiting(keys, Some(wait), None))
    }

    /// One all-or-nothing attempt on every key in `keys`: `None` when any of
    /// them is held, in which case none was taken.
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Locker::lock_all), without [`Error::Timeout`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// if let Some(guard) = locker.try_lock_all(&["seat:12A", "seat:12B"])? {
    ///     println!("both seats are ours, token {}", guard.fencing_token());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the lock is held only while the guard lives: dropping it releases the lock"]
    pub fn try_lock_all<I>(&self, keys: I) -> Result<Option<Guard>, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        with_keys(keys, |keys| self.try_acquire(keys))
    }

    /// A counting semaphore `name` of `permits` permits over this locker's
    /// server and prefix: at most `permits` holders at once, each hold a
    /// [`Guard`] (see [`Semaphore`]). Nothing is sent to Redis yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for 0 permits or more than
    /// [`MAX_PERMITS`](crate::MAX_PERMITS), an empty or reserved name, and
    /// on a Redlock locker ([`Builder::instance`](crate::Builder::instance)),
    /// which has no safe version of a semaphore.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let exports = locker.semaphore("exports", 4)?;
    /// let _permit = exports.acquire()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn semaphore(&self, name: impl AsRef<str>, permits: u32) -> Result<Semaphore, Error> {
        Semaphore::new(self.clone(), name.as_ref(), permits)
    }

    /// A read-write lock `name` over this locker's server and prefix: many
    /// readers at once or one writer, writers first, each hold a [`Guard`]
    /// (see [`RwLock`]). Nothing is sent to Redis yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an empty or reserved name, and on a
    /// Redlock locker ([`Builder::instance`](crate::Builder::instance)),
    /// which has no safe version of a read-write lock.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let config = locker.rwlock("config")?;
    /// let _read = config.read()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn rwlock(&self, name: impl AsRef<str>) -> Result<RwLock, Error> {
        RwLock::new(self.clone(), name.as_ref())
    }

    /// Refuses `what` (semaphores, read-write locks) on a Redlock locker:
    /// their holds are counted on one server, which a quorum of separate
    /// servers cannot do safely.
    pub(crate) fn single_source(&self, what: &str) -> Result<(), Error> {
        if self.shared.config.topology.is_redlock() {
            return Err(Error::InvalidInput(format!(
                "{what} need one server (or Sentinel, or a Cluster): \
                 a Redlock locker has no safe version of them"
            )));
        }
        Ok(())
    }

    /// Who holds `key` right now, or `None` when it is free. One round trip.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an empty or reserved key; [`Error::Redis`]
    /// and [`Error::Pool`] when Redis fails or cannot be reached.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// match locker.holder("nightly-report")? {
    ///     Some(info) => println!("{} holds it (token {})", info.metadata(), info.fencing_token()),
    ///     None => println!("free"),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn holder(&self, key: impl AsRef<str>) -> Result<Option<LockInfo>, Error> {
        self.shared.holder(key.as_ref())
    }

    fn try_acquire(&self, keys: &[&str]) -> Result<Option<Guard>, Error> {
        self.try_acquisition(self.shared.prepare(keys)?)
    }

    /// One attempt of a prepared acquisition (a lock's or a permit's).
    pub(crate) fn try_acquisition(&self, acquisition: Acquisition) -> Result<Option<Guard>, Error> {
        let acquisition = Arc::new(acquisition);
        let queue = self.shared.queue_mode(&acquisition, Queue::Respect);
        match self.shared.acquire(&acquisition, queue)? {
            Outcome::Granted { sent, fence } => self.grant(acquisition, sent, fence).map(Some),
            Outcome::Busy { .. } => Ok(None),
        }
    }

    /// The acquire loop: attempts until granted, or until `wait` (None: no
    /// limit) or the backoff's attempt limit runs out.
    fn acquire_waiting(
        &self,
        keys: &[&str],
        wait: Option<Duration>,
        stop: Option<&AtomicBool>,
    ) -> Result<Guard, Error> {
        self.wait_for(self.shared.prepare(keys)?, wait, stop)
    }

    /// The acquire loop of a prepared acquisition (a lock's or a permit's).
    pub(crate) fn wait_for(
        &self,
        acquisition: Acquisition,
        wait: Option<Duration>,
        stop: Option<&AtomicBool>,
    ) -> Result<Guard, Error> {
        let start = Instant::now();
        let acquisition = Arc::new(acquisition);
        // The key errors and log events name (the first, for several).
        let names = Arc::clone(&acquisition.caller_keys);
        let first = names.first().map_or("", String::as_str);
        let deadline = wait.and_then(|w| time::deadline(start, w));
        let backoff = self.shared.config.backoff;
        let watched = Arc::clone(acquisition.keys.watched());
        let mine = Arc::clone(&acquisition);
        let watch = self.shared.signal().watch(&watched, mine.token.as_str());
        // A queued waiter's place lasts until its next call could come,
        // plus that call's way to the server; a call comes at least every
        // MAX_QUEUED_PAUSE, whatever the backoff (see `waiter_stay`).
        let config = &self.shared.config;
        let stay = waiter_stay(&backoff, config.checkout_timeout, config.io_timeout);
        let queue = self.shared.queue_mode(&acquisition, Queue::Join(stay));
        let claim = self.shared.claim(stay);
        // A queued waiter calls at least this often: a pause of its backoff
        // that is longer is cut into calls that only refresh its place.
        let refresh_every = (queue != Queue::Ignore).then_some(MAX_QUEUED_PAUSE);
        // When the backoff's next attempt is due, while refreshes come first.
        let mut due: Option<Instant> = None;
        let mut attempts: u32 = 0;
        loop {
            let seen = watch.current();
            // A call made only to refresh the waiter's place is no attempt.
            if due.is_none_or(|d| Instant::now() >= d) {
                due = None;
                attempts = attempts.saturating_add(1);
            }
            let outcome = match self.shared.acquire(&acquisition, queue) {
                Ok(outcome) => outcome,
                Err(e) => {
                    // Leave the queue, so that no release hands the lock to
                    // a waiter that has gone; not when the server just did
                    // not answer in time (leaving would cost another
                    // timeout, and the place, with a lock handed to it,
                    // ends with the stay anyway).
                    if queue != Queue::Ignore && !timed_out(&e) {
                        self.shared.dequeue(&acquisition);
                    }
                    return Err(e);
                }
            };
            let (holder_ttl, sent) = match outcome {
                Outcome::Granted { sent, fence } => {
                    if attempts > 1 {
                        waited(first, "acquired", attempts, start);
                    }
                    return self.grant(acquisition, sent, fence);
                }
                Outcome::Busy { holder_ttl, sent } => (holder_ttl, sent),
            };
            let now = Instant::now();
            let out_of_time = deadline.is_some_and(|d| now >= d);
            let out_of_attempts = backoff.attempt_limit().is_some_and(|n| attempts >= n);
            let stopped = stop.is_some_and(|s| s.load(Ordering::SeqCst));
            if out_of_time || out_of_attempts || stopped {
                if queue != Queue::Ignore {
                    // Frees a lock handed over to us in the meantime.
                    self.shared.dequeue(&acquisition);
                }
                if stopped {
                    return Err(Error::Cancelled {
                        key: first.to_owned(),
                    });
                }
                return Err(Error::Timeout {
                    key: first.to_owned(),
                    waited: start.elapsed(),
                    attempts,
                });
            }
            if self.shared.ensure_listening() {
                // The listener just came up: a release may have slipped by.
                continue;
            }
            // The backoff's next attempt (kept while refreshes come first).
            let mut next = due.unwrap_or_else(|| {
                let pause = backoff.delay(attempts - 1, jitter_seed()).min(MAX_TTL);
                time::deadline(now, pause).unwrap_or(now)
            });
            if let Some(ttl) = holder_ttl {
                // Retry right when the holder's lease would have run out.
                let ends = ttl.saturating_add(Duration::from_millis(1)).min(MAX_TTL);
                next = next.min(time::deadline(now, ends).unwrap_or(now));
            }
            let mut wake = next;
            due = None;
            if let Some(refresh) = refresh_every.and_then(|r| time::deadline(now, r)) {
                if refresh < next && deadline.is_none_or(|d| refresh < d) {
                    wake = refresh;
                    due = Some(next);
                }
            }
            if let Some(d) = deadline {
                wake = wake.min(d);
            }
            watch.wait_until(seen, wake);
            if let Some(fence) = watch.take_handed() {
                // A release gave us the lock after the attempt above, as a
                // claim. When it cannot be taken as it is, the next attempt
                // finds it ours and takes it up.
                if self.shared.takes_handed(&acquisition, fence, sent, claim) {
                    waited(first, "handed over", attempts, start);
                    match self.take_up(Arc::clone(&acquisition), sent, fence, claim) {
                        // The claim ran out before the take-up was
                        // confirmed (a slow round trip); the guard's drop
                        // freed it. Wait on, as if it was never handed over,
                        // unless asked to stop or out of time meanwhile (the
                        // hand-over took us out of the queue: nothing to leave).
                        Err(Error::Lost { .. }) => {
                            if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                                return Err(Error::Cancelled {
                                    key: first.to_owned(),
                                });
                            }
                            if deadline.is_some_and(|d| Instant::now() >= d) {
                                return Err(Error::Timeout {
                                    key: first.to_owned(),
                                    waited: start.elapsed(),
                                    attempts,
                                });
                            }
                            continue;
                        }
                        taken => return taken,
                    }
                }
            }
        }
    }

    /// The state behind this locker, for the other primitives on it and
    /// the unit tests that call its script callers directly.
    pub(crate) fn shared(&self) -> &Arc<RawLock> {
        &self.shared
    }

    /// The wait of a call that may be called off: `wait` (checked) when
    /// given, else the builder's acquire timeout.
    pub(crate) fn wait_or_default(
        &self,
        wait: Option<Duration>,
    ) -> Result<Option<Duration>, Error> {
        if let Some(wait) = wait {
            validate_wait("wait", wait)?;
        }
        Ok(wait.or(self.shared.config.acquire_timeout))
    }

    /// Turns a granted acquisition into a guard, starting its watchdog.
    fn grant(&self, a: Arc<Acquisition>, sent: Instant, fence: u64) -> Result<Guard, Error> {
        let config = &self.shared.config;
        self.guard(a, fence, Lease::new(sent, config.ttl, config.drift))
    }

    /// Turns a lock handed over to `a` (a claim of `claim`, counted from
    /// `sent`) into a guard, and takes it up to the full TTL with one
    /// renewal before returning it: a guard is never handed to its user
    /// with only the claim's few seconds left, which would look like a lease
    /// about to run out. When that renewal fails, the guard is dropped (its
    /// keys deleted if still ours) and the error returned; the caller waits
    /// on after [`Error::Lost`] (the claim ran out first).
    fn take_up(
        &self,
        a: Arc<Acquisition>,
        sent: Instant,
        fence: u64,
        claim: Duration,
    ) -> Result<Guard, Error> {
        let config = &self.shared.config;
        let lease = Lease::claimed(sent, claim, config.ttl, config.drift);
        let guard = self.guard(a, fence, lease)?;
        guard.extend(config.ttl)?;
        Ok(guard)
    }

    fn guard(&self, a: Arc<Acquisition>, fence: u64, lease: Lease) -> Result<Guard, Error> {
        let a = a.granted_permit()?;
        if self.shared.config.watchdog {
            self.shared.reserve_for_renewals();
        }
        Guard::new(Arc::clone(&self.shared), a, fence, Arc::new(lease))
    }
}

/// Runs `f` on `keys` as `&str`s, whatever string type they come as.
fn with_keys<I, R>(keys: I, f: impl FnOnce(&[&str]) -> R) -> R
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let items: Vec<I::Item> = keys.into_iter().collect();
    let keys: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    f(&keys)
}

/// Whether a call failed because the server did not answer in time (or
/// no pooled connection came): another call would most likely wait as long.
fn timed_out(e: &Error) -> bool {
    match e {
        Error::Pool(_) => true,
        Error::Redis(e) => e.is_timeout(),
        _ => false,
    }
}

/// The log event of a lock had after waiting: `how` (acquired, or handed
/// over) after `attempts`, counted from `start`.
fn waited(key: &str, how: &str, attempts: u32, start: Instant) {
    log::debug!(
        target: "redmutex::acquire",
        "lock {key:?} {how} after {attempts} attempts in {:?}",
        start.elapsed()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locker_and_guard_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Locker>();
        check::<Guard>();
    }
}
