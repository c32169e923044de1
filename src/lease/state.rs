//! The states a lease goes through ([`LeaseState`]), the report of one
//! transition ([`LeaseChange`]) and the callback that receives it.

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

/// Where a guard's lease stands, as far as this process can tell. Read it
/// with [`Guard::state`](crate::Guard::state), wait for it to change with
/// [`Guard::wait_state_change`](crate::Guard::wait_state_change), or be told
/// of each change by [`Builder::on_lease_change`](crate::Builder::on_lease_change).
///
/// The transitions: `Held -> InDoubt` (a renewal failed, or is overdue),
/// `InDoubt -> Held` (a renewal was confirmed), and `Held -> Lost` or
/// `InDoubt -> Lost`. `Lost` is final.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// use redmutex::LeaseState;
/// let guard = locker.lock("orders")?;
/// match guard.state() {
///     LeaseState::Held => { /* write */ }
///     LeaseState::InDoubt => { /* pause writes until it is Held again */ }
///     LeaseState::Lost => { /* stop: someone else may hold it */ }
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// Not `#[non_exhaustive]`: these three are the whole model (a lease is
// confirmed, unconfirmed, or gone), and a caller's `match` should be
// complete without a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseState {
    /// The last renewal (or the grant) was confirmed by Redis, and the next
    /// one is not overdue: the lease is ours until its deadline.
    Held,
    /// The last renewal failed (an error, a timeout) or is overdue, and the
    /// deadline has not passed: the lease may well be intact, but Redis has
    /// not confirmed it lately (it may have restarted without the key, or
    /// failed over). A renewal confirmed before the deadline makes it
    /// `Held` again.
    ///
    /// "Overdue": a renewal is due a third of the granted TTL after the
    /// last confirmed request was sent; it is overdue when no renewal has
    /// been confirmed by half the granted TTL after that request (so the
    /// renewal had a sixth of the TTL to complete), or by the deadline if
    /// that comes first. Only a guard whose watchdog renews it can be
    /// overdue; with [`Builder::watchdog`](crate::Builder::watchdog) off,
    /// only a failed [`extend`](crate::Guard::extend) puts a lease in doubt.
    InDoubt,
    /// The lease can no longer be promised: its deadline passed without a
    /// confirmed renewal, or Redis showed the key deleted or someone
    /// else's. Final: no later renewal brings it back.
    Lost,
}

impl fmt::Display for LeaseState {
    /// `held`, `in doubt` or `lost`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseState::Held => "held",
            LeaseState::InDoubt => "in doubt",
            LeaseState::Lost => "lost",
        })
    }
}

/// Why a lease changed state; see [`LeaseChange::reason`].
///
/// ```no_run
/// use redmutex::{LeaseChangeReason, LeaseState};
/// let locker = redmutex::Locker::builder(redmutex::pool("redis://127.0.0.1/")?)
///     .on_lease_change(|c| {
///         if c.to() == LeaseState::Lost && c.reason() == LeaseChangeReason::NotOurs {
///             eprintln!("{}: someone else has it now", c.key());
///         }
///     })
///     .build()?;
/// # let _ = locker;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseChangeReason {
    /// To `Held`: a renewal (the watchdog's, or
    /// [`extend`](crate::Guard::extend)) was confirmed.
    Renewed,
    /// To `InDoubt`: a renewal failed (an error or a timeout from Redis).
    RenewalFailed,
    /// To `InDoubt`: no renewal was confirmed in time (see
    /// [`LeaseState::InDoubt`] for the exact moment).
    RenewalOverdue,
    /// To `Lost`: the deadline passed without a confirmed renewal.
    DeadlinePassed,
    /// To `Lost`: Redis showed the key deleted, overwritten or taken by
    /// another owner.
    NotOurs,
}

/// One transition of a guard's lease, as given to the callback set with
/// [`Builder::on_lease_change`](crate::Builder::on_lease_change). It names
/// the lock by the caller's key (the first one, for a multi-key lock); the
/// owner token is never in it.
///
/// ```no_run
/// let locker = redmutex::Locker::builder(redmutex::pool("redis://127.0.0.1/")?)
///     .on_lease_change(|c| eprintln!("{}: {} -> {} ({:?})", c.key(), c.from(), c.to(), c.reason()))
///     .build()?;
/// # let _ = locker;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseChange {
    pub(crate) key: Arc<str>,
    pub(crate) from: LeaseState,
    pub(crate) to: LeaseState,
    pub(crate) reason: LeaseChangeReason,
    pub(crate) at: Instant,
}

impl LeaseChange {
    /// The lock's key as the caller gave it (without prefix; the first key
    /// of a multi-key lock, the name of a semaphore or read-write lock).
    ///
    /// ```no_run
    /// # fn f(c: &redmutex::LeaseChange) {
    /// eprintln!("lease of {} changed", c.key());
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The state before.
    ///
    /// ```no_run
    /// # fn f(c: &redmutex::LeaseChange) {
    /// let recovered = c.from() == redmutex::LeaseState::InDoubt;
    /// # let _ = recovered; }
    /// ```
    pub fn from(&self) -> LeaseState {
        self.from
    }

    /// The state after.
    ///
    /// ```no_run
    /// # fn f(c: &redmutex::LeaseChange) {
    /// let pause = c.to() != redmutex::LeaseState::Held;
    /// # let _ = pause; }
    /// ```
    pub fn to(&self) -> LeaseState {
        self.to
    }

    /// Why it changed.
    ///
    /// ```no_run
    /// # fn f(c: &redmutex::LeaseChange) {
    /// let failed = c.reason() == redmutex::LeaseChangeReason::RenewalFailed;
    /// # let _ = failed; }
    /// ```
    pub fn reason(&self) -> LeaseChangeReason {
        self.reason
    }

    /// When it changed: the moment the event was recorded, or for a change
    /// that time alone makes (overdue, deadline passed) the moment it
    /// became true. The callback may run later than this (see
    /// [`Builder::on_lease_change`](crate::Builder::on_lease_change)).
    ///
    /// ```no_run
    /// # fn f(c: &redmutex::LeaseChange) {
    /// eprintln!("told {:?} after the change", c.at().elapsed());
    /// # }
    /// ```
    pub fn at(&self) -> Instant {
        self.at
    }
}

/// The callback of [`Builder::on_lease_change`](crate::Builder::on_lease_change).
#[derive(Clone)]
pub(crate) struct OnChange(Arc<dyn Fn(&LeaseChange) + Send + Sync>);

impl OnChange {
    pub(crate) fn new(f: impl Fn(&LeaseChange) + Send + Sync + 'static) -> Self {
        OnChange(Arc::new(f))
    }

    /// Calls the callback; a panic in it is caught and logged, so that it
    /// never ends the watchdog that renews the lease.
    pub(crate) fn call(&self, change: &LeaseChange) {
        if panic::catch_unwind(AssertUnwindSafe(|| (self.0)(change))).is_err() {
            log::error!(
                target: "redmutex::lease",
                "lock {:?}: the lease-change callback panicked on {} -> {}; the watchdog goes on",
                change.key(),
                change.from(),
                change.to()
            );
        }
    }
}

impl fmt::Debug for OnChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnChange(..)")
    }
}
