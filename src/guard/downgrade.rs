//! A write hold of a read-write lock turned into a read hold, in one step
//! (`Guard::downgrade`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::Guard;
use crate::info::LockKind;
use crate::lease::Lease;
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
    /// - [`Error::InvalidInput`] when this guard is no write hold (a lock,
    ///   several keys, a permit, a read hold): **nothing is sent for the
    ///   downgrade, and the guard, consumed by the call, is then released as
    ///   its drop would release it** (its keys deleted, waiters woken, its
    ///   release in the stats and the audit trail), so the lock is free when
    ///   the error comes back. `self` is gone and an [`Error`] holds no
    ///   guard: ask first, at no cost, with [`kind`](Guard::kind) (a write
    ///   hold is [`LockKind::Write`](crate::LockKind::Write)) when the guard
    ///   may be another kind and must stay held;
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
    ///
    /// A guard that may be of another kind, asked first:
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let guard = locker.rwlock("config")?.write()?;
    /// use redmutex::LockKind;
    /// let guard = if guard.kind() == LockKind::Write { guard.downgrade()? } else { guard };
    /// # drop(guard);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn downgrade(mut self) -> Result<Guard, Error> {
        let kind = self.kind();
        if kind != LockKind::Write {
            // Consumed: released as its drop releases it, nothing else sent.
            drop(self);
            return Err(Error::InvalidInput(format!(
                "only the write hold of a read-write lock downgrades, not a {} \
                 hold: it was released",
                kind.as_str()
            )));
        }
        let Some(mut held) = self.held.take() else {
            return Err(self.lost());
        };
        if self.lease.is_lost() {
            // As `unlock`: what is still ours is released.
            let _ = held.release(&self.lease, self.fence, true);
            held.count_loss(&self.lease);
            return Err(self.lost());
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
                return Err(self.lost());
            }
            Err(error) => {
                // The script may have run: a write key found gone is no
                // loss of the lease, only of the reply.
                held.acquisition.loss_counted.store(true, Ordering::Relaxed);
                let _ = held.release(&self.lease, self.fence, false);
                return Err(error);
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
        let guard = Guard::new(Arc::clone(&shared), read, fence, Arc::new(lease))?;
        shared.stats.granted(&guard, asked, false);
        Ok(guard)
    }
}
