//! `LockInfo`: what `Locker::holder` reports about a held key.

use std::time::Duration;

/// Who holds a key right now, as returned by
/// [`Locker::holder`](crate::Locker::holder).
///
/// A key that exists but was not written by redmutex (another type, or a
/// string that is not `<owner token>:<fencing token>:<metadata>`) is
/// reported with empty metadata and a fencing token of 0: it blocks the
/// lock all the same.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// if let Some(info) = locker.holder("nightly-report")? {
///     println!("held by {} for another {:?}", info.metadata(), info.ttl());
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    pub(crate) metadata: String,
    pub(crate) ttl: Duration,
    pub(crate) fencing_token: u64,
}

impl LockInfo {
    /// The holder's metadata (see [`Builder::metadata`](crate::Builder::metadata)).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let info = locker.holder("k")?.unwrap();
    /// println!("{}", info.metadata()); // e.g. "build-03:4711"
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn metadata(&self) -> &str {
        &self.metadata
    }

    /// The time left on the lease in Redis (`Duration::MAX` for a key with no
    /// expiry, which only a foreign writer can create).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let info = locker.holder("k")?.unwrap();
    /// let left = info.ttl();
    /// # let _ = left;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The holder's fencing token (0 for a key redmutex did not write).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let info = locker.holder("k")?.unwrap();
    /// println!("current holder's token: {}", info.fencing_token());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }
}
