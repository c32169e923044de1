//! The states a lease goes through ([`LeaseState`]), the report of one
//! transition ([`LeaseChange`]), the callback that receives it, and the
//! lease's state machine: each change made under the lease's mutex, by
//! whoever looks first (time-driven ones at the moment they became true),
//! recorded for the callback, which the watchdog calls in order.

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use super::{Lease, State, TakeUp};

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
    /// A hand-over's short claim, returned before its watchdog took it up
    /// (see [`Guard::valid_until`](crate::Guard::valid_until)), is not
    /// overdue before that take-up: held until it is confirmed, lost at the
    /// claim's deadline if it never is, in doubt only if it fails.
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
    /// To `Lost`: an operator broke the hold
    /// ([`Locker::break_lock`](crate::Locker::break_lock));
    /// [`Guard::lost_reason`](crate::Guard::lost_reason) gives the reason.
    Broken,
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

impl State {
    /// When the renewal expected since `confirmed_at` is overdue: half the
    /// granted TTL after that request was sent (the renewal is due at a
    /// third), or the deadline if that comes first.
    pub(super) fn overdue_at(&self) -> Instant {
        self.confirmed_at
            .checked_add(self.granted / 2)
            .map_or(self.valid_until, |t| t.min(self.valid_until))
    }

    /// The next moment time alone changes the state, if any.
    fn next_change_at(&self) -> Option<Instant> {
        match self.phase {
            LeaseState::Held if self.renewed && self.taking_up.is_none() => Some(self.overdue_at()),
            LeaseState::Held | LeaseState::InDoubt => Some(self.valid_until),
            LeaseState::Lost => None,
        }
    }
}

impl Lease {
    /// Names the lease's lock (`key`, for log events and changes), gives
    /// it the callback for its changes, and says whether a watchdog renews
    /// it (only then can a renewal be overdue). Called once, by the guard
    /// that holds it, before its watchdog starts.
    pub(crate) fn watch(&self, key: &str, on_change: Option<OnChange>, renewed: bool) {
        let mut s = self.state.lock();
        s.key = Arc::from(key);
        s.on_change = on_change;
        s.renewed = renewed;
    }

    /// The state now.
    pub(crate) fn state(&self) -> LeaseState {
        let mut s = self.state.lock();
        self.refresh(&mut s, Instant::now());
        s.phase
    }

    /// True once the lease can no longer be promised; marks it lost for good
    /// when the deadline has passed.
    pub(crate) fn is_lost(&self) -> bool {
        self.state() == LeaseState::Lost
    }

    /// Redis said the key is not ours: lost for good.
    pub(crate) fn mark_lost(&self) {
        let mut s = self.state.lock();
        self.refresh(&mut s, Instant::now());
        self.move_to(
            &mut s,
            LeaseState::Lost,
            LeaseChangeReason::NotOurs,
            Instant::now(),
        );
    }

    /// A renewal failed (an error, not an answer that the key is not
    /// ours): a held lease is in doubt.
    pub(crate) fn note_failed(&self) {
        let mut s = self.state.lock();
        let now = Instant::now();
        self.refresh(&mut s, now);
        if s.phase == LeaseState::Held {
            self.move_to(
                &mut s,
                LeaseState::InDoubt,
                LeaseChangeReason::RenewalFailed,
                now,
            );
        }
    }

    /// Blocks until the lease is lost or `until` passes; returns whether it
    /// is lost.
    pub(crate) fn wait_lost(&self, until: Instant) -> bool {
        self.wait(until, |phase| phase == LeaseState::Lost) == LeaseState::Lost
    }

    /// Blocks until the state differs from `seen` or `until` passes;
    /// returns the state then (at once once lost: no change can come).
    pub(crate) fn wait_change(&self, seen: LeaseState, until: Instant) -> LeaseState {
        self.wait(until, |phase| phase != seen)
    }

    /// Blocks until `done(state)` or `until` passes; returns the state.
    fn wait(&self, until: Instant, done: impl Fn(LeaseState) -> bool) -> LeaseState {
        let mut s = self.state.lock();
        loop {
            let now = Instant::now();
            self.refresh(&mut s, now);
            // Lost is final: nothing is left to wait for.
            if done(s.phase) || now >= until || s.phase == LeaseState::Lost {
                return s.phase;
            }
            let wake = s.next_change_at().map_or(until, |t| t.min(until));
            self.changed.wait_until(&mut s, wake);
        }
    }

    /// Makes the changes time alone made by `now`, each at the moment it
    /// became true, in order: overdue (only with a watchdog), then the
    /// deadline.
    pub(super) fn refresh(&self, s: &mut State, now: Instant) {
        if s.phase == LeaseState::Held && s.renewed && s.taking_up.is_none() {
            let at = s.overdue_at();
            if now >= at {
                self.move_to(
                    s,
                    LeaseState::InDoubt,
                    LeaseChangeReason::RenewalOverdue,
                    at,
                );
            }
        }
        if s.phase != LeaseState::Lost && now >= s.valid_until {
            let at = s.valid_until;
            self.move_to(s, LeaseState::Lost, LeaseChangeReason::DeadlinePassed, at);
        }
    }

    /// One change of state (none out of `Lost`, which is final): recorded
    /// for the callback (unless the guard is gone, or is a hand-over taken
    /// up before its return and not yet, which its user has not seen),
    /// logged, and waiters woken.
    pub(super) fn move_to(
        &self,
        s: &mut State,
        to: LeaseState,
        reason: LeaseChangeReason,
        at: Instant,
    ) {
        let from = s.phase;
        if from == to || from == LeaseState::Lost {
            return;
        }
        s.phase = to;
        let key = &s.key;
        match to {
            LeaseState::Held => log::info!(
                target: "redmutex::lease",
                "lock {key:?} is held again: a renewal was confirmed after doubt"
            ),
            LeaseState::InDoubt => log::warn!(
                target: "redmutex::lease",
                "lock {key:?} is in doubt: {}",
                match reason {
                    LeaseChangeReason::RenewalOverdue => "no renewal confirmed in time",
                    _ => "a renewal failed",
                }
            ),
            // `log_lost` tells a loss, at `error`.
            LeaseState::Lost => {}
        }
        if s.on_change.is_some() && !s.stopped && s.taking_up != Some(TakeUp::Before) {
            s.pending.push(LeaseChange {
                key: Arc::clone(&s.key),
                from,
                to,
                reason,
                at,
            });
        }
        self.changed.notify_all();
    }

    /// The state now, and the changes that led to it not yet given to the
    /// callback, in order, with the callback (`None` without one).
    #[allow(clippy::type_complexity)] // a pair read under one lock, used once
    pub(crate) fn take_changes(&self) -> (LeaseState, Option<(OnChange, Vec<LeaseChange>)>) {
        let mut s = self.state.lock();
        self.refresh(&mut s, Instant::now());
        let changes = s
            .on_change
            .clone()
            .map(|f| (f, std::mem::take(&mut s.pending)));
        (s.phase, changes)
    }

    /// Whether changes wait to be given to the callback.
    pub(crate) fn has_untold(&self) -> bool {
        !self.state.lock().pending.is_empty()
    }

    /// The next moment time alone changes the state (overdue, deadline),
    /// or `None` once lost.
    pub(crate) fn next_change_at(&self) -> Option<Instant> {
        let mut s = self.state.lock();
        self.refresh(&mut s, Instant::now());
        s.next_change_at()
    }
}

#[cfg(all(test, not(loom)))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A lease named `k` with a callback (which these tests never call:
    /// they take the recorded changes themselves).
    fn watched(sent: Instant, ttl: Duration, renewed: bool) -> Lease {
        let lease = Lease::new(sent, ttl, None);
        lease.watch("k", Some(OnChange::new(|_| {})), renewed);
        lease
    }

    /// The changes recorded so far, in order, with their reasons and times.
    fn told(lease: &Lease) -> Vec<(LeaseState, LeaseState, LeaseChangeReason, Instant)> {
        let (_, changes) = lease.take_changes();
        changes
            .map(|(_, c)| c)
            .unwrap_or_default()
            .iter()
            .map(|c| (c.from(), c.to(), c.reason(), c.at()))
            .collect()
    }

    use LeaseState::{Held, InDoubt, Lost};

    #[test]
    fn a_failed_renewal_puts_the_lease_in_doubt_and_a_confirmed_one_ends_it() {
        let lease = watched(Instant::now(), Duration::from_secs(60), true);
        assert_eq!(lease.state(), Held);
        lease.note_failed();
        assert_eq!(lease.state(), InDoubt);
        assert!(!lease.is_lost());
        lease.note_failed(); // no second change
        assert!(lease.confirm(Instant::now(), Duration::from_secs(60)));
        assert_eq!(lease.state(), Held);
        let changes: Vec<_> = told(&lease)
            .into_iter()
            .map(|(f, t, r, _)| (f, t, r))
            .collect();
        assert_eq!(
            changes,
            [
                (Held, InDoubt, LeaseChangeReason::RenewalFailed),
                (InDoubt, Held, LeaseChangeReason::Renewed)
            ]
        );
        assert!(told(&lease).is_empty(), "each change is taken once");
    }

    #[test]
    fn time_alone_makes_a_lease_overdue_then_lost_at_those_moments() {
        let sent = Instant::now() - Duration::from_secs(10);
        let lease = watched(sent, Duration::from_secs(1), true);
        let deadline = lease.valid_until();
        assert_eq!(lease.state(), Lost);
        assert_eq!(
            told(&lease),
            [
                (
                    Held,
                    InDoubt,
                    LeaseChangeReason::RenewalOverdue,
                    sent + Duration::from_millis(500)
                ),
                (InDoubt, Lost, LeaseChangeReason::DeadlinePassed, deadline),
            ]
        );
        // Without a watchdog nothing is overdue: held until the deadline.
        let manual = watched(sent, Duration::from_secs(1), false);
        assert_eq!(manual.state(), Lost);
        assert_eq!(
            told(&manual),
            [(Held, Lost, LeaseChangeReason::DeadlinePassed, deadline)]
        );
    }

    #[test]
    fn a_late_confirmation_whose_next_renewal_is_overdue_stays_in_doubt() {
        let now = Instant::now();
        let ttl = Duration::from_secs(10);
        let lease = watched(now - Duration::from_secs(9), ttl, true);
        assert_eq!(lease.state(), InDoubt);
        // Sent 7 s ago, for 10 s: the next is overdue 5 s after sending.
        assert!(lease.confirm(now - Duration::from_secs(7), ttl));
        assert_eq!(lease.state(), InDoubt);
        // No flap (held, then at once in doubt again): one change so far.
        let changes: Vec<_> = told(&lease)
            .into_iter()
            .map(|(f, t, _, _)| (f, t))
            .collect();
        assert_eq!(changes, [(Held, InDoubt)]);
        // Sent just now: held again.
        assert!(lease.confirm(Instant::now(), ttl));
        assert_eq!(lease.state(), Held);
    }

    #[test]
    fn a_claim_is_not_overdue_before_its_take_up() {
        let claim = Duration::from_secs(2);
        let lease = Lease::claimed(
            Instant::now() - Duration::from_millis(1500),
            claim,
            Duration::from_secs(60),
            None,
            TakeUp::Before,
        );
        lease.watch("k", Some(OnChange::new(|_| {})), true);
        // Past half the claim, before its deadline: no renewal was due.
        assert_eq!(lease.state(), Held);
        assert!(lease.confirm(Instant::now(), Duration::from_secs(60)));
        assert_eq!(lease.state(), Held);
        assert!(told(&lease).is_empty());
        // From the take-up on, the usual rules.
        lease.note_failed();
        assert_eq!(lease.state(), InDoubt);
        assert_eq!(told(&lease).len(), 1);
    }

    /// A claim returned before its take-up: held, not overdue, until its
    /// deadline, then lost (never held past it); its take-up due at once,
    /// retried within the claim; its changes told (its user saw it).
    #[test]
    fn a_claim_returned_before_its_take_up_is_held_only_until_its_deadline() {
        let (claim, ttl) = (Duration::from_millis(300), Duration::from_secs(60));
        let sent = Instant::now() - Duration::from_millis(200);
        let lease = Lease::claimed(sent, claim, ttl, None, TakeUp::Behind);
        lease.watch("k", Some(OnChange::new(|_| {})), true);
        assert_eq!(lease.renewal_due(), sent, "the take-up is due at once");
        assert_eq!(lease.retry_pause(), claim / 10);
        let deadline = lease.valid_until();
        assert!(deadline <= sent + claim);
        // Past half the claim, before its deadline: held.
        assert_eq!(lease.state(), Held);
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(lease.wait_change(Held, far), Lost);
        assert!(Instant::now() >= deadline);
        assert_eq!(
            told(&lease),
            [(Held, Lost, LeaseChangeReason::DeadlinePassed, deadline)]
        );
        // Taken up in time, it goes on as any lease.
        let lease = Lease::claimed(Instant::now(), claim, ttl, None, TakeUp::Behind);
        lease.watch("k", Some(OnChange::new(|_| {})), true);
        let taken = Instant::now();
        assert!(lease.confirm(taken, ttl));
        assert_eq!(lease.state(), Held);
        assert!(told(&lease).is_empty(), "held to held is no change");
        assert_eq!(lease.renewal_due(), taken + ttl / 3);
        assert_eq!(lease.retry_pause(), ttl / 10);
    }

    #[test]
    fn changes_after_stop_are_not_recorded() {
        let lease = watched(Instant::now(), Duration::from_secs(60), true);
        lease.note_failed();
        lease.stop();
        lease.mark_lost();
        assert_eq!(lease.state(), Lost);
        let changes: Vec<_> = told(&lease)
            .into_iter()
            .map(|(f, t, _, _)| (f, t))
            .collect();
        assert_eq!(changes, [(Held, InDoubt)]);
    }

    #[test]
    fn wait_change_wakes_when_the_renewal_is_overdue() {
        let lease = watched(Instant::now(), Duration::from_millis(200), true);
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(lease.wait_change(Held, far), InDoubt);
        assert_eq!(lease.wait_change(InDoubt, far), Lost);
        // Lost is final: a wait for a change from it returns at once.
        let start = Instant::now();
        assert_eq!(lease.wait_change(Lost, far), Lost);
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            start.elapsed()
        );
    }
}
