//! `Locker`: the handle users clone around, and its API. The one acquire
//! loop under it is in `locker/acquire.rs`.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use r2d2::{ManageConnection, Pool};
use redis::ConnectionLike;

use crate::builder::Builder;
use crate::config::{validate_wait, Config};
use crate::conn::{self, Connector};
use crate::defaults::DEFAULT_IO_TIMEOUT;
use crate::election::Election;
use crate::guard::Guard;
use crate::info::LockInfo;
use crate::open;
use crate::raw::RawLock;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
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
/// Locks are not reentrant, and a thread that would wait for itself is
/// told: a thread that holds a key through this locker (or a clone) and
/// asks for it again, with `lock`, `try_lock`, `lock_all` or their kin,
/// gets [`Error::AlreadyHeld`] at once, with no round trip, rather than
/// waiting behind its own guard (as Hazelcast's lock fails fast). Another
/// thread waits for the guard as usual (`try_lock` says `None`), and so
/// does a locker built apart. A guard counts for the thread that took it
/// until its hold ends, even once moved to another thread: the library
/// cannot see a move, so a thread that hands its guard to a worker and
/// locks the key again is refused too; wait for the worker first (join
/// it, or a channel). The same goes for a semaphore's last permit, a
/// read-write lock and an election (see [`Error::AlreadyHeld`]).
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
    /// made for locking, after one connection that checks the server and
    /// the password.
    ///
    /// That connection (a `PING`, then closed) returns within the I/O
    /// timeout, [`DEFAULT_IO_TIMEOUT`](crate::DEFAULT_IO_TIMEOUT), host
    /// name lookup included (it runs on a thread of its own, which a server
    /// that does not answer may keep a few timeouts longer). A server that
    /// refuses the connection fails the call at once, as a refused password
    /// does; one that never answers, within the I/O timeout; one that
    /// answers the handshake but is slow to answer the `PING` passes. To
    /// build a locker before the server is up (it may come up later, and
    /// lock calls say so meanwhile), use `Locker::new(redmutex::pool(url)?)`,
    /// which sends nothing. For Sentinel use [`Locker::open_sentinel`], for
    /// a Cluster [`Locker::open_cluster`], for several independent masters
    /// (Redlock) [`Builder::instance`].
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when no connection can be made (refused, an
    /// unknown host, no answer within the I/O timeout), with the address
    /// tried and why; [`Error::InvalidUrl`] when `url` is not a valid Redis
    /// URL (saying which part is wrong), is TLS without the `tls` feature,
    /// names Sentinel or a Cluster, or a database the server does not
    /// have; [`Error::Auth`] when the server refuses the password, or
    /// requires one that `url` lacks; [`Error::Unsupported`] when it does
    /// not know `HELLO` (which `protocol=resp3` needs).
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
        open::check_server(&client, DEFAULT_IO_TIMEOUT)?;
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
    /// - [`Error::AlreadyHeld`] at once, with no round trip, when this thread
    ///   holds the key already, through this locker or a clone;
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
    /// else holds it (another thread of this locker included), and
    /// [`Error::AlreadyHeld`] if this thread does, through this locker or a
    /// clone (locks are not reentrant). One round trip; never waits for the
    /// lock.
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

    /// A leader election `name` over this locker's server and prefix: at
    /// most one leader at a time, whose value and term everyone can read
    /// and follow (see [`Election`]). Nothing is sent to Redis yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an empty or reserved name;
    /// [`Error::Unsupported`] on a Redlock locker
    /// ([`Builder::instance`](crate::Builder::instance)), where the log of
    /// changes cannot be kept.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let election = locker.election("scheduler")?;
    /// let _leadership = election.campaign("10.0.0.7:8080")?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn election(&self, name: impl AsRef<str>) -> Result<Election, Error> {
        Election::new(self.clone(), name.as_ref())
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

    /// Who holds `key` right now, and who waits for it (see
    /// [`LockInfo::waiters`]), or `None` when it is free. One round trip.
    /// `key` is a lock's key, or any name [`locks`](Locker::locks) gives a
    /// hold ([`LockInfo::key`]: a permit, a read or write hold, an
    /// election's leader, `__redmutex__:election:<name>`). It is read under
    /// its own prefix ([`LockInfo::prefix`]): a locker without a prefix
    /// reads lock `nr` of prefix `jobs`, waiters and all, by `jobs:nr`, and
    /// a locker of `jobs` reads lock `jobs:nr` of no prefix by `nr`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an empty key or a reserved one that names
    /// no hold, and for a key
    /// redmutex did not write (an application's value under that name, or
    /// one without an expiry): no hold, though it keeps the lock from
    /// everyone while it stays (see [`LockInfo`]); [`Error::Redis`] and
    /// [`Error::Pool`] when Redis fails or cannot be reached.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// match locker.holder("nightly-report")? {
    ///     Some(info) => println!(
    ///         "{} holds it (token {}), {} waiting",
    ///         info.metadata(),
    ///         info.fencing_token(),
    ///         info.waiters().len()
    ///     ),
    ///     None => println!("free"),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn holder(&self, key: impl AsRef<str>) -> Result<Option<LockInfo>, Error> {
        self.shared.holder(key.as_ref())
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

mod acquire;
mod stats;

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
