//! A write hold of a read-write lock turned into a read hold, in one step
//! (`Guard::downgrade`), and the error that hands back a guard it could not
//! turn.

use std::fmt;

use super::Guard;
use crate::Error;

impl Guard {
    /// Turns this write hold of a [`RwLock`](crate::RwLock) into a read
    /// hold, at once and in one script: nobody, writer or reader, can take
    /// the lock in between, and the read hold's
    /// [fencing token](Guard::fencing_token) is above the write hold's. One
    /// round trip (after a renewal in flight, if any, is waited for).
    ///
    /// The read hold is a guard of its own with the whole lease API: a full
    /// TTL from the request, renewed by a watchdog of its own from then on
    /// (the write hold's stops before the script runs: no gap, no renewal
    /// twice), released on drop. It carries the write hold's metadata, and
    /// with [`Builder::lock_delay`](crate::Builder::lock_delay) the delay
    /// follows the read hold. The stats count the write hold's end and a
    /// read grant; the audit trail (with
    /// [`Builder::audit`](crate::Builder::audit)) has a `downgrade` event of
    /// the write hold's token, then the read hold's `grant`.
    ///
    /// # Fairness
    ///
    /// The rules of a read-write lock hold, as if the writer had released
    /// and the read hold had been there first: readers queued before the
    /// first queued writer come in at once (they are woken); a writer queued
    /// stays queued, first come, first served, and goes in once the read
    /// holds before it end, this one included; readers queued behind that
    /// writer stay behind it, and so do readers who come later.
    ///
    /// # Errors
    ///
    /// A [`DowngradeError`], which converts into [`Error`] (so `?` works
    /// where an `Error` is returned), with [`error`](DowngradeError::error):
    ///
    /// - [`Error::InvalidInput`] when this guard is no write hold (a lock,
    ///   several keys, a permit, a read hold, a leadership): **nothing is
    ///   done, and the guard, still held, is in the error**
    ///   ([`into_guard`](DowngradeError::into_guard));
    /// - [`Error::Lost`] when the write hold was lost (nothing is changed in
    ///   Redis; the loss is told and counted as any other);
    /// - [`Error::NotReplicated`] with
    ///   [`Builder::min_replicas`](crate::Builder::min_replicas) when too few
    ///   replicas acknowledged it, [`Error::Redis`], [`Error::Pool`] when
    ///   Redis fails, [`Error::Thread`] when the read hold's watchdog cannot
    ///   start: neither hold is kept (each released where still ours).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let config = locker.rwlock("config")?;
    /// let write = config.write()?;
    /// // ... write the new configuration ...
    /// let read = write.downgrade()?; // no writer in between: we read what we wrote
    /// // ... read it along with the other readers ...
    /// # drop(read);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn downgrade(self) -> Result<Guard, DowngradeError> {
        Err(DowngradeError {
            error: Error::Unsupported {
                reason: "not yet".to_owned(),
            },
            guard: Some(self),
        })
    }
}

/// The error of [`Guard::downgrade`]: why it failed, and the guard when it
/// is still held (a guard that is no write hold comes back untouched).
/// Converts into [`Error`], so `?` works in a function that returns one.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let lock = locker.lock("report")?;
/// match lock.downgrade() {
///     Ok(_read) => unreachable!("a lock is no write hold"),
///     Err(e) => {
///         assert!(matches!(e.error(), redmutex::Error::InvalidInput(_)));
///         if let Some(lock) = e.into_guard() {
///             lock.unlock()?; // handed back, still held
///         }
///     }
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
pub struct DowngradeError {
    error: Error,
    guard: Option<Guard>,
}

impl DowngradeError {
    /// Why the downgrade failed.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let write = locker.rwlock("config")?.write()?;
    /// if let Err(e) = write.downgrade() {
    ///     eprintln!("no read hold: {}", e.error());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The guard, still held, when it was handed back: one that is no
    /// write hold ([`Error::InvalidInput`]); `None` after any other error.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let permit = locker.semaphore("exports", 2)?.acquire()?;
    /// let permit = match permit.downgrade() {
    ///     Ok(guard) => guard,
    ///     Err(e) => e.into_guard().expect("a permit comes back"),
    /// };
    /// # drop(permit);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn into_guard(self) -> Option<Guard> {
        self.guard
    }

    /// The error and the guard, if handed back.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let guard = locker.lock("report")?;
    /// let (error, guard) = guard.downgrade().err().map(|e| e.into_parts()).unwrap();
    /// println!("{error}; still held: {}", guard.is_some());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn into_parts(self) -> (Error, Option<Guard>) {
        (self.error, self.guard)
    }
}

impl From<DowngradeError> for Error {
    /// The error alone (a guard handed back is dropped, and released).
    fn from(e: DowngradeError) -> Error {
        e.error
    }
}

impl fmt::Debug for DowngradeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DowngradeError")
            .field("error", &self.error)
            .field("guard", &self.guard)
            .finish()
    }
}

/// The error's own words: the guard handed back is no cause.
impl fmt::Display for DowngradeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for DowngradeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}
