//! A write hold of a read-write lock turned into a read hold, in one step
//! (`Guard::downgrade`), and the error that hands back a guard it could not
//! turn.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::Guard;
use crate::lease::Lease;
use crate::protocol::keys::Hold;
use crate::raw::Downgrade;
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
    pub fn downgrade(mut self) -> Result<Guard, DowngradeError> {
        let write = self
            .held
            .as_ref()
            .is_some_and(|h| matches!(h.acquisition.keys.hold, Hold::Write { .. }));
        if !write {
            let what = if self.held.is_some() {
                "only a write hold of a read-write lock downgrades"
            } else {
                "this guard holds nothing"
            };
            return Err(DowngradeError {
                error: Error::InvalidInput(what.to_owned()),
                guard: Some(Box::new(self)),
            });
        }
        let lost = |guard: &Guard| DowngradeError {
            error: guard.lost(),
            guard: None,
        };
        let Some(mut held) = self.held.take() else {
            return Err(lost(&self));
        };
        if self.lease.is_lost() {
            // As `unlock`: what is still ours is released.
            let _ = held.release(&self.lease, self.fence, true);
            held.count_loss(&self.lease);
            return Err(lost(&self));
        }
        // Dropping the handle stops the watchdog: no renewal after this.
        drop(held.watchdog.take());
        let asked = Instant::now();
        let shared = Arc::clone(&held.shared);
        let (read, fence, sent) = match shared.downgrade(&held.acquisition) {
            Ok(Downgrade::Read { read, fence, sent }) => (read, fence, sent),
            Ok(Downgrade::Lost(why)) => {
                held.found_lost(&self.lease, why);
                held.ended(&self.lease, true);
                return Err(lost(&self));
            }
            Err(error) => {
                // The script may have run: a write key found gone is no
                // loss of the lease, only of the reply.
                held.acquisition.loss_counted.store(true, Ordering::Relaxed);
                let _ = held.release(&self.lease, self.fence, false);
                return Err(DowngradeError { error, guard: None });
            }
        };
        // The write hold ended in the script: its end, then the read grant.
        if held.audited {
            shared.audit_held(&held.acquisition, self.fence, "downgrade");
        }
        held.ended(&self.lease, false);
        shared.notify_released(&held.acquisition, None);
        let config = &shared.config;
        if config.watchdog {
            shared.reserve_for_renewals();
        }
        let lease = Lease::new(sent, config.ttl, config.drift);
        let guard = Guard::new(Arc::clone(&shared), read, fence, Arc::new(lease))
            .map_err(|error| DowngradeError { error, guard: None })?;
        shared.stats.granted(&guard, asked, false);
        Ok(guard)
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
    /// Boxed: an error stays small, on the path that does not fail too.
    guard: Option<Box<Guard>>,
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
        self.guard.map(|g| *g)
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
        (self.error, self.guard.map(|g| *g))
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
