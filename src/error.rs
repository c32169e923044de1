//! The one error type of the crate.

use std::time::Duration;

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

    /// The lease can no longer be promised: it ran out without a confirmed
    /// renewal, or the key was deleted, overwritten or taken by another owner.
    ///
    /// Returned by [`Guard::ensure_held`](crate::Guard::ensure_held),
    /// [`Guard::extend`](crate::Guard::extend) and
    /// [`Guard::unlock`](crate::Guard::unlock). A lost guard stays lost.
    #[error("lock {key:?} was lost")]
    Lost {
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
    /// too large for Redis, a zero or unrepresentable timeout, an empty key or
    /// key list, a duplicate key in a multi-key lock, a reserved key name.
    ///
    /// Returned by [`Builder::build`](crate::Builder::build) and by any method
    /// that takes a key or a duration, before anything is sent to Redis.
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// Redis answered with an error, or the connection failed or timed out.
    ///
    /// Returned by every method that talks to Redis. The lock state is unknown
    /// to this process: a guard stays valid until its deadline unless renewed.
    #[error("redis command failed")]
    Redis(#[source] redis::RedisError),

    /// No pooled connection could be had within the checkout timeout (the
    /// server is down, or every connection is busy).
    ///
    /// Returned by every method that talks to Redis.
    #[error("no redis connection within the checkout timeout")]
    Pool(#[source] r2d2::Error),

    /// The operating system's random source failed while minting an owner token.
    ///
    /// Returned by the `lock*` and `try_lock*` methods; it does not happen on
    /// ordinary systems.
    #[error("no randomness for the owner token")]
    Random(#[source] getrandom::Error),

    /// The OS refused to start the watchdog thread.
    ///
    /// Returned by the `lock*` and `try_lock*` methods when the watchdog is on;
    /// the lock was released again before returning.
    #[error("could not start the watchdog thread")]
    Thread(#[source] std::io::Error),
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e)
    }
}

impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        Error::Pool(e)
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
}
