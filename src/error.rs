//! The one error type of the crate.

use std::time::Duration;

use redis::RedisError;

mod refusal;

// A server's refusal, read from its words (`open` reads them too).
pub(crate) use refusal::{auth_reason, auth_reason_in_text, database_refused, handshake_unknown};

/// Everything that can go wrong while taking, keeping or releasing a lock.
///
/// Contention is not an error: [`Locker::try_lock`](crate::Locker::try_lock)
/// returns `Ok(None)` when someone else holds the key. Match with `{ .. }`,
/// since variants may gain fields:
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// use std::time::Duration;
/// match locker.lock_timeout("invoice-42", Duration::from_secs(2)) {
///     Ok(guard) => { /* critical section */ drop(guard) }
///     Err(redmutex::Error::Timeout { waited, .. }) => eprintln!("busy for {waited:?}, try later"),
///     Err(e) => return Err(e.into()),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock stayed busy until the wait ran out.
    ///
    /// Returned by [`Locker::lock`](crate::Locker::lock) and
    /// [`Locker::lock_all`](crate::Locker::lock_all) when the builder's
    /// `acquire_timeout` passes or the backoff's attempt limit is reached, and by
    /// [`Locker::lock_timeout`](crate::Locker::lock_timeout) when its `wait` passes.
    #[error("lock {key:?} still busy after {waited:?} and {attempts} attempts")]
    Timeout {
        /// The key (the first one, for a multi-key lock), as the caller gave it.
        key: String,
        /// How long the call waited.
        waited: Duration,
        /// How many acquisition attempts were made.
        attempts: u32,
    },

    /// The wait was called off: the flag given to
    /// [`Locker::lock_or_stop`](crate::Locker::lock_or_stop) was set. Nothing
    /// was left behind in Redis.
    #[error("the wait for lock {key:?} was called off")]
    Cancelled {
        /// The key, as the caller gave it.
        key: String,
    },

    /// The calling thread already holds what the call asks for, through
    /// this locker or a clone of it, so the call could only wait behind
    /// itself: a key of a lock it holds (by `lock`, `lock_all` or their
    /// kin), a read-write lock it holds (for a write) or holds the write
    /// of (for a read), every permit of a semaphore, an election it leads.
    /// Nothing is sent to Redis. A guard counts for the thread that took it
    /// until its hold ends, even moved to another thread, unless its lease
    /// is lost ([`Guard::is_lost`](crate::Guard::is_lost)).
    ///
    /// Returned at once, with no round trip, by every call that takes a
    /// hold: [`Locker::lock`](crate::Locker::lock) and
    /// [`Locker::lock_all`](crate::Locker::lock_all) with their `_timeout`,
    /// `_or_stop` and `try_` kin, a
    /// [`Semaphore`](crate::Semaphore)'s `acquire*`, an
    /// [`RwLock`](crate::RwLock)'s `read*` and `write*`, and an
    /// [`Election`](crate::Election)'s `campaign*`.
    #[error("lock {key:?} is held by this thread already: it would wait for itself")]
    AlreadyHeld {
        /// The key (of a multi-key lock, the one held), or the semaphore's,
        /// read-write lock's or election's name, as the caller gave it.
        key: String,
    },

    /// The lease can no longer be promised: it ran out without a confirmed
    /// renewal, or the key was deleted, overwritten or taken by another owner.
    ///
    /// Returned by [`Guard::ensure_held`](crate::Guard::ensure_held),
    /// [`Guard::extend`](crate::Guard::extend),
    /// [`Guard::run_if_held`](crate::Guard::run_if_held) (nothing ran) and
    /// [`Guard::unlock`](crate::Guard::unlock) and
    /// [`Guard::downgrade`](crate::Guard::downgrade). A lost guard stays lost.
    /// Also by [`fence::admit_and_run`](crate::fence::admit_and_run) for a
    /// stale token, with `key` the resource key (nothing ran).
    #[error("lock {key:?} was lost")]
    Lost {
        /// The key (the first one, for a multi-key lock), as the caller gave it.
        key: String,
    },

    /// The lease is in doubt ([`LeaseState::InDoubt`](crate::LeaseState::InDoubt)):
    /// its last renewal failed or is overdue, and its deadline has not
    /// passed. It may well be intact, and is held again when a renewal is
    /// confirmed: wait for that with
    /// [`Guard::wait_state_change`](crate::Guard::wait_state_change).
    ///
    /// Returned by [`Guard::ensure_confirmed`](crate::Guard::ensure_confirmed).
    #[error("lock {key:?} is in doubt: its last renewal failed or is overdue")]
    InDoubt {
        /// The key (the first one, for a multi-key lock), as the caller gave it.
        key: String,
    },

    /// Too few Redlock instances answered for a decision: errors, timeouts or
    /// slowness left no majority within the lease's validity. Any partial
    /// hold was released on every instance before this was returned.
    ///
    /// Returned by every method that talks to Redis when the locker has more
    /// than one instance ([`Builder::instance`](crate::Builder::instance));
    /// with one instance its error is returned as it is.
    #[error("only {granted} of the {needed} instances needed answered in time")]
    NoQuorum {
        /// How many instances granted (or confirmed).
        granted: usize,
        /// How many were needed (a majority).
        needed: usize,
        /// The last error an instance returned, if any.
        #[source]
        last: Option<Box<Error>>,
    },

    /// Fewer replicas than [`Builder::min_replicas`](crate::Builder::min_replicas)
    /// acknowledged the acquisition within the replica timeout; the lock was
    /// released again.
    ///
    /// Returned by the `lock*` and `try_lock*` methods.
    #[error("only {acked} of {needed} replicas acknowledged the lock")]
    NotReplicated {
        /// Replicas that acknowledged.
        acked: u64,
        /// Replicas required.
        needed: u64,
    },

    /// A setting or argument that cannot work: a TTL below one millisecond or
    /// too large for Redis, a zero timeout or one above `MAX_TTL`, an empty key or
    /// key list, a duplicate key in a multi-key lock, a reserved key name.
    ///
    /// Returned by [`Builder::build`](crate::Builder::build) and by any method
    /// that takes a key or a duration, before anything is sent to Redis; by
    /// [`Guard::run_if_held`](crate::Guard::run_if_held) and the
    /// [`fence`](crate::fence) helpers for commands the server does not know
    /// or whose arguments it refuses (before any runs), and by
    /// `run_if_held` for a key of the lock's own or, on a Cluster, outside
    /// the lock key's hash slot. By [`Guard::downgrade`](crate::Guard::downgrade)
    /// for a guard that is no write hold (which it then releases).
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// The server cannot do what a locker needs: it is older than
    /// [`MIN_REDIS_VERSION`](crate::MIN_REDIS_VERSION), or it will not run
    /// the lock's scripts (scripting switched off, no Lua engine, or an ACL
    /// user without `EVAL` or `EVALSHA`). `reason` says which.
    ///
    /// Returned by the `lock*` and `try_lock*` methods (and a semaphore's
    /// `acquire*`), which read the version before a locker's first
    /// acquisition on a server, and by any method whose script the server
    /// refuses to run. Also by [`Locker::open`](crate::Locker::open) and any
    /// method that connects, when the server does not know a command of the
    /// connection's handshake (`HELLO` for `protocol=resp3`, `AUTH`). And by
    /// [`Guard::run_if_held`](crate::Guard::run_if_held) in Redlock mode,
    /// where no single master holds the lock's truth. And by the `lock*` and
    /// `try_lock*` methods with
    /// [`Builder::min_replicas`](crate::Builder::min_replicas) when the
    /// server refuses `WAIT` (managed services that do not offer it); the
    /// lock just taken is released first.
    #[error("unsupported server: {reason}")]
    Unsupported {
        /// What the server lacks, and what would fix it.
        reason: String,
    },

    /// A URL that cannot work, and why: which part is wrong (the scheme, the
    /// host, the port, the database), that `rediss://` needs the `tls`
    /// feature, or which constructor a Sentinel or Cluster URL needs. The
    /// URL itself is never repeated (it may hold a password).
    ///
    /// Returned by [`Locker::open`](crate::Locker::open),
    /// [`pool`](crate::pool()), [`sentinel_pool`](crate::sentinel_pool) and
    /// [`cluster_pool`](crate::cluster_pool), before anything is sent. A
    /// database the server does not have is told by `Locker::open` (which
    /// connects) and by any method that connects.
    #[error("invalid redis url: {reason}")]
    InvalidUrl {
        /// What is wrong, or what to use instead.
        reason: String,
        /// redis-rs's error, when it refused a URL found sound here.
        #[source]
        source: Option<redis::RedisError>,
    },

    /// The server refused the credentials: it requires a password and got
    /// none, or the user name or password is wrong (or the user disabled).
    /// Valkey also says so (NOAUTH) when it does not know HELLO (renamed),
    /// which sends the password under `protocol=resp3`: the reason names
    /// that case, where Redis gives [`Error::Unsupported`].
    ///
    /// Returned by [`Locker::open`](crate::Locker::open) at once (it
    /// connects once to check), and by every method that talks to Redis:
    /// at once when the server asks for a password, after the checkout
    /// timeout when connections fail to authenticate (the pool retries
    /// them until then).
    #[error("authentication failed: {reason}")]
    Auth {
        /// What the server said, in words (never the password).
        reason: String,
        /// The server's own words (the redis-rs or r2d2 error they were
        /// read from), once: a chain printer shows them below `reason`.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// The server could not be reached: the connection was refused, the
    /// host name is unknown, or nothing answered within the I/O timeout.
    /// `address` is the host and port (or socket path) tried, never a
    /// password; `reason` says what happened (`connection refused`,
    /// `timed out ...`).
    ///
    /// Returned by [`Locker::open`](crate::Locker::open), which connects
    /// once before it returns. Later calls on a server gone away say
    /// [`Error::Pool`] or [`Error::Redis`], with the cause in their message.
    #[error("cannot reach redis at {address}: {reason}")]
    Unreachable {
        /// The host and port, or the Unix socket's path, tried.
        address: String,
        /// What went wrong, in words.
        reason: String,
    },

    /// Redis answered with an error, or the connection failed or timed out.
    /// The message says which, with Redis's own words (`redis answered
    /// with an error: WRONGTYPE ...`, `cannot reach redis: connection
    /// refused`, `no answer from redis in time (timed out)`); the
    /// redis-rs error is in the field, not repeated as `source()`.
    ///
    /// Returned by every method that talks to Redis. The lock state is unknown
    /// to this process: a guard stays valid until its deadline unless renewed.
    #[error("{}", redis_words(.0))]
    Redis(redis::RedisError),

    /// No pooled connection could be had within the checkout timeout (the
    /// server is down, or every connection is busy). The message says why
    /// the last connection attempt failed (`connection refused`, `timed
    /// out`) when r2d2 kept that for this call: it keeps the last one for
    /// the next checkout that gives up, so of several calls waiting at once
    /// (or a checkout timeout shorter than r2d2's pause between attempts,
    /// up to half its own connection timeout) one is told, the others say
    /// only that no connection was free or made in time. The r2d2 error is
    /// in the field, not repeated as `source()`.
    ///
    /// Returned by every method that talks to Redis.
    #[error("no redis connection within the checkout timeout: {}", pool_cause(.0))]
    Pool(r2d2::Error),

    /// The operating system's random source failed while minting an owner token.
    ///
    /// Returned by the `lock*` and `try_lock*` methods; it does not happen on
    /// ordinary systems.
    #[error("no randomness for the owner token")]
    Random(#[source] getrandom::Error),

    /// The OS refused to start a thread the call needed: a guard's
    /// watchdog, or (with several instances) one of the threads that ask
    /// the instances in parallel, which also reports a panic of such a
    /// thread this way.
    ///
    /// Returned by the `lock*` and `try_lock*` methods when the watchdog is
    /// on (the lock was released again before returning), and with several
    /// instances by every method that talks to Redis.
    #[error("could not start a thread")]
    Thread(#[source] std::io::Error),
}

impl Error {
    /// Whether the lock stayed busy until the wait ran out
    /// ([`Error::Timeout`]): the lock is someone else's, and trying again
    /// later may succeed.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// match locker.lock_timeout("report", std::time::Duration::from_secs(1)) {
    ///     Err(e) if e.is_timeout() => println!("someone else is on it"),
    ///     other => drop(other?),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// Whether Redis could not be reached or did not answer in time: no
    /// pooled connection within the checkout timeout, a connection refused,
    /// cut or timed out ([`Error::Unreachable`] from `Locker::open` too),
    /// or (with several instances) too few of them answering. The lock's state is unknown to this process; a guard
    /// stays valid until its deadline unless renewed.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// match locker.try_lock("report") {
    ///     Err(e) if e.is_connection() => eprintln!("redis is unreachable: {e}"),
    ///     other => drop(other?),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn is_connection(&self) -> bool {
        match self {
            Error::Pool(_) | Error::NoQuorum { .. } | Error::Unreachable { .. } => true,
            Error::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_refusal()
                    || e.is_connection_dropped()
            }
            _ => false,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        if let Some(unknown) = handshake_unknown(&e.to_string()) {
            return unknown;
        }
        match auth_reason(&e) {
            Some(reason) => Error::Auth {
                reason: reason.to_owned(),
                source: Box::new(Once(e)),
            },
            None => match database_refused(&e.to_string()) {
                Some(reason) => Error::InvalidUrl {
                    reason: reason.to_owned(),
                    source: Some(e),
                },
                None => Error::Redis(e),
            },
        }
    }
}

impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        // r2d2 keeps only the text of the last failed connect.
        let text = e.to_string();
        if let Some(unknown) = handshake_unknown(&text) {
            return unknown;
        }
        match auth_reason_in_text(&text) {
            Some(reason) => Error::Auth {
                reason: reason.to_owned(),
                source: Box::new(e),
            },
            None => match database_refused(&text) {
                Some(reason) => Error::InvalidUrl {
                    reason: reason.to_owned(),
                    source: None,
                },
                None => Error::Pool(e),
            },
        }
    }
}

/// A redis-rs error, said once: redis-rs's error shows the same words as
/// its own source (the server's reply, or the I/O error), so a chain
/// printer would say them twice. This says them, and goes on from below
/// the repeat.
struct Once(RedisError);

impl std::fmt::Display for Once {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Debug for Once {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::error::Error for Once {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source().and_then(|repeat| repeat.source())
    }
}

/// An I/O error's words as a sentence goes on with them: no `(os error
/// N)`, wherever it stands (redis-rs nests one in its own parentheses),
/// lowercase first (`connection refused`).
fn plain_io(text: &str) -> String {
    const OS: &str = " (os error ";
    let mut plain = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OS) {
        let after = &rest[at + OS.len()..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        match after[digits..].strip_prefix(')') {
            Some(next) if digits > 0 => {
                plain.push_str(&rest[..at]);
                rest = next;
            }
            _ => {
                plain.push_str(&rest[..=at]);
                rest = &rest[at + 1..];
            }
        }
    }
    plain.push_str(rest);
    let mut chars = plain.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

/// What went wrong in a redis-rs error, in one line: the server's error
/// reply, or what became of the connection.
fn redis_words(e: &RedisError) -> String {
    let text = e.to_string();
    if e.is_timeout() {
        // An OS timeout's words say nothing more; a message of ours does.
        return if text.contains("(os error ") {
            "no answer from redis in time (timed out)".to_owned()
        } else {
            format!("no answer from redis in time (timed out): {text}")
        };
    }
    if e.is_connection_refusal() {
        return format!("cannot reach redis: {}", plain_io(&text));
    }
    if e.is_connection_dropped() {
        return format!("connection to redis closed: {}", plain_io(&text));
    }
    if e.is_io_error() {
        return format!("connection to redis failed: {}", plain_io(&text));
    }
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("redis answered with an error: {code} {detail}"),
        (Some(code), None) => format!("redis answered with an error: {code}"),
        _ => format!("redis command failed: {text}"),
    }
}

/// Why r2d2 had no connection to give: the last connection error it kept,
/// in words, or that none failed.
fn pool_cause(e: &r2d2::Error) -> String {
    let text = e.to_string();
    // r2d2's own words come first, then the last connection error's.
    let Some((_, last)) = text.split_once(": ") else {
        return "every connection was in use, or none could be made in time".to_owned();
    };
    if last.contains("(os error 11)") || last.contains("(os error 110)") {
        return "timed out".to_owned();
    }
    plain_io(last)
}

/// The words for a failure to reach the server, when `e` is one (refused,
/// timed out, cut, an unknown host): for [`Error::Unreachable`].
pub(crate) fn unreachable_reason(e: &RedisError, timeout: std::time::Duration) -> Option<String> {
    if e.is_timeout() {
        Some(format!("timed out (no answer within {timeout:?})"))
    } else if e.is_io_error() || e.is_connection_dropped() {
        Some(plain_io(&e.to_string()))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_send_sync_static() {
        fn check<T: Send + Sync + 'static + std::error::Error>() {}
        check::<Error>();
    }

    #[test]
    fn messages_are_lowercase_without_period() {
        let e = Error::Lost { key: "k".into() };
        let s = e.to_string();
        assert!(
            s.starts_with(char::is_lowercase) && !s.ends_with('.'),
            "{s}"
        );
    }

    #[test]
    fn io_words_read_as_part_of_a_sentence() {
        assert_eq!(
            plain_io("Connection refused (os error 111)"),
            "connection refused"
        );
        assert_eq!(
            plain_io("failed to lookup address information"),
            "failed to lookup address information"
        );
        assert_eq!(plain_io(""), "");
        assert_eq!(
            plain_io("Io: Failed (127.0.0.1:1: Connection refused (os error 111))"),
            "io: Failed (127.0.0.1:1: Connection refused)"
        );
        assert_eq!(plain_io("x (os error y)"), "x (os error y)");
        let refused = Error::Redis(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert_eq!(
            refused.to_string(),
            "cannot reach redis: connection refused"
        );
        assert!(std::error::Error::source(&refused).is_none());
    }

    #[test]
    fn helpers_sort_errors() {
        let timeout = Error::Timeout {
            key: "k".into(),
            waited: Duration::from_secs(1),
            attempts: 3,
        };
        assert!(timeout.is_timeout() && !timeout.is_connection());
        let refused = Error::Redis(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(refused.is_connection() && !refused.is_timeout());
        let no_quorum = Error::NoQuorum {
            granted: 1,
            needed: 2,
            last: None,
        };
        assert!(no_quorum.is_connection());
        let script = Error::Redis(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "ERR",
        )));
        assert!(!script.is_connection());
        assert!(!Error::InvalidInput("x".into()).is_connection());
    }
}
