//! `Locker`: the handle users clone around, and the one acquire loop.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use r2d2::{ManageConnection, Pool};
use redis::{ConnectionLike, Value};

use crate::backoff::jitter_seed;
use crate::builder::{validate_wait, Builder, Config};
use crate::guard::Guard;
use crate::info::LockInfo;
use crate::keys;
use crate::lease::Lease;
use crate::pool::{self, Connector};
use crate::scripts;
use crate::time;
use crate::token::Token;
use crate::wait::Signal;
use crate::watchdog::Renewal;
use crate::Error;

/// Takes distributed locks on one Redis server.
///
/// Cheap to clone (an `Arc` inside); clones share the pool and settings.
/// Lockers exclude each other when they use the same server and prefix,
/// whether they live in one process or on many machines.
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
    shared: Arc<Shared>,
}

/// State shared by a locker's clones, its guards and their watchdogs.
pub(crate) struct Shared {
    connector: Arc<dyn Connector>,
    pub(crate) config: Config,
    /// Wakes this locker's waiters when one of its guards releases.
    released: Signal,
}

// `Locker` is `Send + Sync` because `Shared` is: the connector is required to
// be `Send + Sync`, and `Config` and `Signal` hold plain data behind locks.

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Conn<'a>(&'a dyn Connector);
        impl fmt::Debug for Conn<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.describe(f)
            }
        }
        f.debug_struct("Locker")
            .field("config", &self.shared.config)
            .field("connection", &Conn(self.shared.connector.as_ref()))
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
        Builder::new(Arc::new(pool)).build_unchecked()
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
        Builder::new(Arc::new(pool))
    }

    /// `Locker::new(redmutex::pool(url)?)`: default settings over a pool
    /// made for locking.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when `url` is not a valid Redis URL. Nothing is sent
    /// to the server yet.
    ///
    /// ```no_run
    /// let locker = redmutex::Locker::open("redis://127.0.0.1:6379/")?;
    /// # let _ = locker;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn open(url: &str) -> Result<Locker, Error> {
        Ok(Locker::new(pool::pool(url)?))
    }

    pub(crate) fn from_parts(connector: Arc<dyn Connector>, config: Config) -> Locker {
        Locker {
            shared: Arc::new(Shared {
                connector,
                config,
                released: Signal::default(),
            }),
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
    pub fn lock(&self, key: &str) -> Result<Guard, Error> {
        self.acquire_waiting(&[key], self.shared.config.acquire_timeout)
    }

    /// Like [`lock`](Locker::lock), but waits at most `wait` for this call.
    ///
    /// # Errors
    ///
    /// As [`lock`](Locker::lock); [`Error::InvalidInput`] as well when `wait`
    /// is too large to add to the current time.
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
    pub fn lock_timeout(&self, key: &str, wait: Duration) -> Result<Guard, Error> {
        validate_wait("wait", wait)?;
        self.acquire_waiting(&[key], Some(wait))
    }

    /// One attempt: the lock on `key` if it is free now, `None` if someone
    /// holds it (including this locker: locks are not reentrant). One round
    /// trip; never waits for the lock.
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
    pub fn try_lock(&self, key: &str) -> Result<Option<Guard>, Error> {
        self.try_acquire(&[key])
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
    pub fn lock_all(&self, keys: &[&str]) -> Result<Guard, Error> {
        self.acquire_waiting(keys, self.shared.config.acquire_timeout)
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
    pub fn lock_all_timeout(&self, keys: &[&str], wait: Duration) -> Result<Guard, Error> {
        validate_wait("wait", wait)?;
        self.acquire_waiting(keys, Some(wait))
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
    pub fn try_lock_all(&self, keys: &[&str]) -> Result<Option<Guard>, Error> {
        self.try_acquire(keys)
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
    pub fn holder(&self, key: &str) -> Result<Option<LockInfo>, Error> {
        keys::validate_key(key)?;
        let lock_key = self.shared.config.keys.lock_key(key);
        let mut call = scripts::HOLDER.prepare_invoke();
        call.key(&lock_key);
        let reply = self.shared.run(&mut |c| call.invoke(c))?;
        parse_holder(reply)
    }

    fn try_acquire(&self, keys: &[&str]) -> Result<Option<Guard>, Error> {
        keys::validate_keys(keys)?;
        let attempt = Attempt::new(&self.shared, keys)?;
        match attempt.once()? {
            Outcome::Granted { sent, fence } => self.grant(attempt, sent, fence).map(Some),
            Outcome::Busy { .. } => Ok(None),
        }
    }

    /// The acquire loop: attempts until granted, or until `wait` (None: no
    /// limit) or the backoff's attempt limit runs out.
    fn acquire_waiting(&self, keys: &[&str], wait: Option<Duration>) -> Result<Guard, Error> {
        keys::validate_keys(keys)?;
        let start = Instant::now();
        let deadline = wait.and_then(|w| time::deadline(start, w));
        let backoff = self.shared.config.backoff;
        let attempt = Attempt::new(&self.shared, keys)?;
        let mut attempts: u32 = 0;
        loop {
            let seen = self.shared.released.current();
            attempts = attempts.saturating_add(1);
            let holder_ttl = match attempt.once()? {
                Outcome::Granted { sent, fence } => return self.grant(attempt, sent, fence),
                Outcome::Busy { holder_ttl } => holder_ttl,
            };
            let now = Instant::now();
            let out_of_time = deadline.is_some_and(|d| now >= d);
            let out_of_attempts = backoff.attempt_limit().is_some_and(|n| attempts >= n);
            if out_of_time || out_of_attempts {
                return Err(Error::Timeout {
                    key: keys.first().map_or_else(String::new, |k| (*k).to_owned()),
                    waited: start.elapsed(),
                    attempts,
                });
            }
            let mut pause = backoff.delay(attempts - 1, jitter_seed());
            if let Some(ttl) = holder_ttl {
                // Retry right when the holder's lease would have run out.
                pause = pause.min(ttl.saturating_add(Duration::from_millis(1)));
            }
            let mut wake = time::deadline(now, pause).unwrap_or(now);
            if let Some(d) = deadline {
                wake = wake.min(d);
            }
            self.shared.released.wait_until(seen, wake);
        }
    }

    /// Turns a granted attempt into a guard, starting its watchdog.
    fn grant(&self, attempt: Attempt<'_>, sent: Instant, fence: u64) -> Result<Guard, Error> {
        let config = &self.shared.config;
        let lease = Arc::new(Lease::new(sent, config.ttl));
        Guard::new(
            Arc::clone(&self.shared),
            attempt.caller_keys,
            attempt.redis_keys,
            attempt.token,
            fence,
            lease,
        )
    }
}

/// One acquisition: its token (kept across retries, so a retry after a lost
/// reply finds the key already ours) and its keys.
struct Attempt<'a> {
    shared: &'a Shared,
    token: Token,
    caller_keys: Vec<String>,
    /// The lock keys in Redis, in the caller's order.
    redis_keys: Arc<[String]>,
    fence_key: String,
}

enum Outcome {
    Granted {
        sent: Instant,
        fence: u64,
    },
    Busy {
        /// How long the busy key's lease has left, when it has a TTL.
        holder_ttl: Option<Duration>,
    },
}

impl<'a> Attempt<'a> {
    fn new(shared: &'a Shared, keys: &[&str]) -> Result<Self, Error> {
        let space = &shared.config.keys;
        Ok(Attempt {
            shared,
            token: Token::new()?,
            caller_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            redis_keys: keys.iter().map(|k| space.lock_key(k)).collect(),
            fence_key: space.fence_key(),
        })
    }

    /// One round trip. On an I/O error (a timeout, a dropped connection) the
    /// script may have run although no reply came back: the release by token
    /// is sent at once on the *same* connection, so Redis runs it after the
    /// acquire whenever the acquire runs, and no orphan lock waits out its
    /// TTL. The error reported is the acquire's.
    fn once(&self) -> Result<Outcome, Error> {
        let config = &self.shared.config;
        let mut call = scripts::ACQUIRE.prepare_invoke();
        call.key(&self.fence_key)
            .key(&*self.redis_keys)
            .arg(self.token.as_str())
            .arg(time::millis_ceil(config.ttl))
            .arg(&config.metadata);
        // A plain EVAL: a NOSCRIPT reply would silently skip the clean-up.
        let mut undo = redis::cmd("EVAL");
        undo.arg(&*scripts::RELEASE_SRC)
            .arg(self.redis_keys.len())
            .arg(&*self.redis_keys)
            .arg(self.token.as_str());
        let sent = Instant::now();
        let reply = self.shared.run(&mut |c| {
            call.invoke(c).inspect_err(|e| {
                if e.is_io_error() {
                    // Best effort; its own failure changes nothing we report.
                    let _ = undo.query::<Value>(c);
                }
            })
        })?;
        parse_acquire(reply, sent)
    }
}

impl Shared {
    /// Runs one Redis operation on a pooled connection, bounded by the
    /// checkout and I/O timeouts.
    pub(crate) fn run(
        &self,
        op: &mut dyn FnMut(&mut dyn ConnectionLike) -> redis::RedisResult<Value>,
    ) -> Result<Value, Error> {
        self.connector
            .run(self.config.checkout_timeout, self.config.io_timeout, op)
    }

    /// Deletes the keys still owned by `token`; returns how many were.
    pub(crate) fn release(&self, redis_keys: &[String], token: &Token) -> Result<usize, Error> {
        let mut call = scripts::RELEASE.prepare_invoke();
        call.key(redis_keys).arg(token.as_str());
        let reply = self.run(&mut |c| call.invoke(c))?;
        let deleted = int_reply(&reply, "release")?;
        Ok(usize::try_from(deleted).unwrap_or(0))
    }

    /// One owner-checked renewal of `lease` for `ttl`, recorded in the lease.
    /// Serialized per lease, so concurrent `extend` and watchdog calls confirm
    /// in the order Redis applied them.
    pub(crate) fn renew(
        &self,
        lease: &Lease,
        redis_keys: &[String],
        token: &Token,
        ttl: Duration,
    ) -> Result<Renewal, Error> {
        let _serial = lease.renewing();
        if lease.is_lost() {
            return Ok(Renewal::Lost);
        }
        let mut call = scripts::RENEW.prepare_invoke();
        call.key(redis_keys)
            .arg(token.as_str())
            .arg(time::millis_ceil(ttl));
        let sent = Instant::now();
        let reply = self.run(&mut |c| call.invoke(c))?;
        if int_reply(&reply, "renew")? == 1 && lease.confirm(sent, ttl) {
            Ok(Renewal::Confirmed)
        } else {
            lease.mark_lost();
            Ok(Renewal::Lost)
        }
    }

    /// Wakes this locker's waiters after a release.
    pub(crate) fn notify_released(&self) {
        self.released.notify();
    }
}

fn unexpected(what: &str, reply: &Value) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected script reply",
        format!("{what}: {reply:?}"),
    )))
}

fn int_reply(reply: &Value, what: &str) -> Result<i64, Error> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected(what, other)),
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// A bulk string is the fencing token of a grant; an integer is the PTTL of
/// the busy key (negative: no TTL).
fn parse_acquire(reply: Value, sent: Instant) -> Result<Outcome, Error> {
    match &reply {
        Value::Int(pttl) => Ok(Outcome::Busy {
            holder_ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
        }),
        other => match text(other).and_then(|s| s.parse::<u64>().ok()) {
            Some(fence) => Ok(Outcome::Granted { sent, fence }),
            None => Err(unexpected("acquire", &reply)),
        },
    }
}

fn parse_holder(reply: Value) -> Result<Option<LockInfo>, Error> {
    let Value::Array(items) = &reply else {
        return Err(unexpected("holder", &reply));
    };
    match items.as_slice() {
        [] => Ok(None),
        [meta, fence, Value::Int(pttl)] => {
            let (Some(metadata), Some(fence)) = (text(meta), text(fence)) else {
                return Err(unexpected("holder", &reply));
            };
            Ok(Some(LockInfo {
                metadata,
                fencing_token: fence.parse().unwrap_or(0),
                ttl: u64::try_from(*pttl).map_or(Duration::MAX, Duration::from_millis),
            }))
        }
        _ => Err(unexpected("holder", &reply)),
    }
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

    #[test]
    fn acquire_replies() {
        let now = Instant::now();
        match parse_acquire(Value::BulkString(b"1763712345000001".to_vec()), now).unwrap() {
            Outcome::Granted { fence, .. } => assert_eq!(fence, 1_763_712_345_000_001),
            Outcome::Busy { .. } => panic!("granted expected"),
        }
        match parse_acquire(Value::Int(250), now).unwrap() {
            Outcome::Busy { holder_ttl } => {
                assert_eq!(holder_ttl, Some(Duration::from_millis(250)))
            }
            Outcome::Granted { .. } => panic!("busy expected"),
        }
        assert!(matches!(
            parse_acquire(Value::Int(-1), now).unwrap(),
            Outcome::Busy { holder_ttl: None }
        ));
        assert!(parse_acquire(Value::Nil, now).is_err());
        assert!(parse_acquire(Value::BulkString(b"x".to_vec()), now).is_err());
    }

    #[test]
    fn holder_replies() {
        assert_eq!(parse_holder(Value::Array(vec![])).unwrap(), None);
        let info = parse_holder(Value::Array(vec![
            Value::BulkString(b"host:1".to_vec()),
            Value::BulkString(b"42".to_vec()),
            Value::Int(1500),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(info.metadata(), "host:1");
        assert_eq!(info.fencing_token(), 42);
        assert_eq!(info.ttl(), Duration::from_millis(1500));
        let foreign = parse_holder(Value::Array(vec![
            Value::BulkString(vec![]),
            Value::BulkString(b"0".to_vec()),
            Value::Int(-1),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(foreign.ttl(), Duration::MAX);
        assert!(parse_holder(Value::Int(3)).is_err());
    }
}
