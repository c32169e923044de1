//! What a guard is and counts for: its kind (as its caller asks it, and as
//! the stats count it) and its place in its locker's registry of holds by
//! thread (taken out when its hold ends).

use super::{Guard, Held};
use crate::info::LockKind;
use crate::stats::recorder::{Kind, Kinded};

impl Guard {
    /// What this guard holds: a lock (one key or several), a permit of a
    /// [`Semaphore`](crate::Semaphore), a read or the write hold of a
    /// [`RwLock`](crate::RwLock), or (through
    /// [`Leadership::guard`](crate::Leadership::guard)) the lead of an
    /// [`Election`](crate::Election). No round trip. Only a write hold
    /// [downgrades](Guard::downgrade): ask first where a guard may be of
    /// another kind.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use redmutex::LockKind;
    /// let write = locker.rwlock("config")?.write()?;
    /// assert_eq!(write.kind(), LockKind::Write);
    /// assert_eq!(locker.lock("report")?.kind(), LockKind::Lock);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn kind(&self) -> LockKind {
        match Kinded::kind(self) {
            Kind::Lock => LockKind::Lock,
            Kind::Permit => LockKind::Permit,
            Kind::Read => LockKind::Read,
            Kind::Write => LockKind::Write,
            Kind::Leader => LockKind::Leader,
        }
    }
}

/// What the stats count this guard's grant as: its acquisition's kind.
impl Kinded for Guard {
    fn kind(&self) -> Kind {
        self.held
            .as_ref()
            .map_or(Kind::Lock, |h| h.acquisition.kind())
    }
}

/// The hold ended (or this guard was consumed into another one): it no
/// longer counts for its thread.
impl Drop for Held {
    fn drop(&mut self) {
        self.shared.unfile(&self.acquisition, self.filed);
    }
}
