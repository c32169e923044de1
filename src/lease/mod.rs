//! A lease and what keeps it: the local view of one lease, shared by a
//! guard and its watchdog (here), its states and their changes
//! ([`state`]), the watchdog that renews it ([`watchdog`]), and the
//! process-wide threads watchdogs run on ([`workers`]).
//!
//! "Lost" is final and monotonic: once any reader has seen the deadline pass,
//! or Redis has said the key is not ours, no later renewal can bring it back.
//! Every read and update goes through one mutex so that holds without races.

pub(crate) mod state;
pub(crate) mod watchdog;
pub(crate) mod workers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{Condvar, Mutex};

use crate::time;

use self::state::{LeaseChange, LeaseChangeReason, LeaseState, OnChange};

#[derive(Debug)]
pub(crate) struct Lease {
    state: Mutex<State>,
    /// The builder's fixed drift allowance, if any.
    drift: Option<Duration>,
    /// Notified on every change of state.
    changed: Condvar,
    /// Held across a renewal round trip and its confirmation, so that
    /// `extend` and the watchdog never confirm out of order.
    renewing: Mutex<()>,
    /// Why the lease was lost, when Redis said more than "not yours" (an
    /// operator broke the hold): set once, before it is marked lost.
    why: Mutex<Option<String>>,
}

#[derive(Debug)]
struct State {
    valid_until: Instant,
    /// When the request behind `valid_until` was sent.
    confirmed_at: Instant,
    /// The TTL that request set: the TTL, or a hand-over's shorter claim.
    granted: Duration,
    /// The TTL renewals set.
    ttl: Duration,
    /// A renewal wanted sooner than usual (Redlock: to take the instances
    /// a rival held for a moment), and how many times in a row.
    hurry: Option<(Instant, u32)>,
    /// Held, in doubt, or lost (final). Time-driven changes (overdue,
    /// deadline passed) are made by [`refresh`] under this mutex, by
    /// whoever looks first, at the moment they became true.
    phase: LeaseState,
    /// The guard is gone: no renewal may start any more.
    stopped: bool,
    /// A watchdog renews this lease: a renewal can be overdue.
    renewed: bool,
    /// A hand-over's claim, not taken up yet (see [`Lease::claimed`]): no
    /// renewal of it is overdue before its take-up, and, while its guard
    /// has not been returned ([`TakeUp::Before`]), no change is told of a
    /// guard its user has not seen. The first confirmation ends it.
    taking_up: Option<TakeUp>,
    /// The lock's key as the caller gave it, for log events and changes.
    key: Arc<str>,
    /// The builder's callback, if any, and the changes it has not been
    /// given yet (the watchdog gives them, in order).
    on_change: Option<OnChange>,
    pending: Vec<LeaseChange>,
}

/// When a hand-over's claim is taken up (renewed to the TTL): see
/// [`Lease::claimed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakeUp {
    /// By the acquiring call, before it returns the guard (with a
    /// lock-delay, for an election, or without a watchdog): the user never
    /// sees the claim, and no change of it is told.
    Before,
    /// By the guard's watchdog, at once, after the guard is returned: the
    /// user holds the claim until the take-up is confirmed.
    Behind,
}

impl Lease {
    /// A lease granted by a request sent at `sent` for `ttl`.
    pub(crate) fn new(sent: Instant, ttl: Duration, drift: Option<Duration>) -> Self {
        Lease::with(sent, ttl, ttl, drift, None)
    }

    /// A lease that a hand-over granted by a request sent at `sent`, for a
    /// claim of `claim`, renewed to `ttl` from its first renewal on: the
    /// take-up, made `when` says. Until it is confirmed, the lease is held
    /// until the claim's deadline (`valid_until`), and no renewal of it is
    /// overdue: it goes from `Held` to `Lost` at that deadline, unless a
    /// renewal fails first (`InDoubt`). Taken up [`TakeUp::Behind`], its
    /// first renewal is due at once.
    pub(crate) fn claimed(
        sent: Instant,
        claim: Duration,
        ttl: Duration,
        drift: Option<Duration>,
        when: TakeUp,
    ) -> Self {
        Lease::with(sent, claim, ttl, drift, Some(when))
    }

    fn with(
        sent: Instant,
        claim: Duration,
        ttl: Duration,
        drift: Option<Duration>,
        taking_up: Option<TakeUp>,
    ) -> Self {
        Lease {
            drift,
            state: Mutex::new(State {
                valid_until: end(sent, claim, drift),
                confirmed_at: sent,
                granted: claim,
                ttl,
                hurry: None,
                phase: LeaseState::Held,
                stopped: false,
                renewed: false,
                taking_up,
                key: Arc::from(""),
                on_change: None,
                pending: Vec::new(),
            }),
            changed: Condvar::new(),
            renewing: Mutex::new(()),
            why: Mutex::new(None),
        }
    }

    /// Redis said the key is not ours because an operator broke the hold
    /// (see `Locker::break_lock`), saying `reason`: lost for good, with
    /// `broken by an operator: <reason>` as why (unless it was lost before).
    pub(crate) fn mark_broken(&self, reason: &str) {
        let mut s = self.state.lock();
        let now = Instant::now();
        self.refresh(&mut s, now);
        if s.phase != LeaseState::Lost {
            *self.why.lock() = Some(format!("broken by an operator: {reason}"));
        }
        self.move_to(&mut s, LeaseState::Lost, LeaseChangeReason::Broken, now);
    }

    /// Why the lease is lost, once it is: an operator's break with its
    /// reason, its deadline passing without a confirmed renewal, or Redis
    /// showing the key gone or someone else's. `None` while it is not lost.
    pub(crate) fn lost_reason(&self) -> Option<String> {
        if !self.is_lost() {
            return None;
        }
        if let Some(why) = self.why.lock().clone() {
            return Some(why);
        }
        Some(if self.valid_until() <= Instant::now() {
            "its deadline passed without a confirmed renewal".to_owned()
        } else {
            "Redis showed the key gone or someone else's".to_owned()
        })
    }

    /// Logs that the lease of `key` is lost, and why (at `error`: the
    /// holder can no longer be promised the lock).
    pub(crate) fn log_lost(&self, key: &str) {
        let why = self.lost_reason().unwrap_or_default();
        log::error!(target: "redmutex::lease", "lock {key:?} is lost: {why}");
    }

    /// A renewal for `ttl`, sent at `sent`, was confirmed. Returns false (and
    /// changes nothing) when the lease was already lost or its deadline passed
    /// before the confirmation arrived. A lease in doubt is held again,
    /// unless the renewal after this one is overdue already.
    pub(crate) fn confirm(&self, sent: Instant, ttl: Duration) -> bool {
        let mut s = self.state.lock();
        let now = Instant::now();
        self.refresh(&mut s, now);
        if s.phase == LeaseState::Lost {
            return false;
        }
        s.valid_until = end(sent, ttl, self.drift);
        s.confirmed_at = sent;
        s.granted = ttl;
        s.ttl = ttl;
        s.taking_up = None;
        // Held again, unless the next renewal is overdue already (the
        // confirmation took longer than the renewal's whole term).
        if now < s.overdue_at() || !s.renewed {
            self.move_to(&mut s, LeaseState::Held, LeaseChangeReason::Renewed, now);
        }
        true
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.state.lock().valid_until
    }

    /// A hand-over's claim to be taken up before its guard is returned
    /// ([`TakeUp::Before`]), not taken up yet.
    pub(crate) fn takes_up_before(&self) -> bool {
        matches!(self.state.lock().taking_up, Some(TakeUp::Before))
    }

    /// The TTL renewals should use, and when the last confirmed request was sent.
    pub(crate) fn schedule(&self) -> (Duration, Instant) {
        let s = self.state.lock();
        (s.ttl, s.confirmed_at)
    }

    /// When the next renewal is due: a third of the granted TTL after the
    /// last confirmed request was sent, or sooner when hurried; a claim
    /// taken up behind its guard's return, at once; one taken up before,
    /// not before the claim's deadline (the acquiring call renews it, and
    /// the watchdog's turn comes after that renewal).
    pub(crate) fn renewal_due(&self) -> Instant {
        let s = self.state.lock();
        match s.taking_up {
            Some(TakeUp::Behind) => return s.confirmed_at,
            Some(TakeUp::Before) => return s.valid_until,
            None => {}
        }
        let usual = s
            .confirmed_at
            .checked_add(s.granted / 3)
            .unwrap_or(s.valid_until);
        match s.hurry {
            Some((at, _)) => at.min(usual),
            None => usual,
        }
    }

    /// How long after a failed renewal the next is tried: a tenth of the
    /// TTL, or of a claim not taken up yet (so that a take-up that failed
    /// is tried again within the claim), at least a millisecond.
    pub(crate) fn retry_pause(&self) -> Duration {
        let s = self.state.lock();
        (s.ttl.min(s.granted) / 10).max(Duration::from_millis(1))
    }

    /// Asks for the next renewal soon: 10 ms from now, doubling each time
    /// it is asked again in a row (never later than usual). A call of
    /// [`Lease::unhurry`] ends it.
    pub(crate) fn hurry(&self) {
        let mut s = self.state.lock();
        let n = s.hurry.map_or(0, |(_, n)| n.saturating_add(1)).min(16);
        let wait = Duration::from_millis(10).saturating_mul(1 << n.min(16));
        s.hurry = Instant::now().checked_add(wait).map(|at| (at, n));
    }

    /// Renewals back at their usual pace.
    pub(crate) fn unhurry(&self) {
        self.state.lock().hurry = None;
    }

    /// Runs one renewal `f`, serialized with every other renewal of this
    /// lease (see the field's doc); `None`, without running it, once
    /// [`Lease::stop`] has been called.
    pub(crate) fn serialized<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        let _serial = self.renewing.lock();
        if self.state.lock().stopped {
            return None;
        }
        Some(f())
    }

    /// No renewal starts after this returns; one in flight is waited for
    /// (it is bounded by the connection timeouts). The guard calls it when
    /// it goes, so its watchdog thread need not be waited for.
    pub(crate) fn stop(&self) {
        let _serial = self.renewing.lock();
        self.state.lock().stopped = true;
    }
}

/// The local end of a lease granted at `sent`: `sent + ttl - drift`. An end
/// that cannot be represented becomes `sent`, i.e. already expired: the safe
/// side.
fn end(sent: Instant, ttl: Duration, drift: Option<Duration>) -> Instant {
    time::deadline(sent, ttl.saturating_sub(time::drift(ttl, drift))).unwrap_or(sent)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_counted_from_sending_minus_drift() {
        let sent = Instant::now();
        let lease = Lease::new(sent, Duration::from_secs(30), None);
        assert_eq!(
            lease.valid_until(),
            sent + Duration::from_secs(30) - Duration::from_millis(302)
        );
        assert!(!lease.is_lost());
    }

    #[test]
    fn passing_the_deadline_is_final() {
        let long_ago = Instant::now() - Duration::from_secs(10);
        let lease = Lease::new(long_ago, Duration::from_secs(1), None);
        assert!(lease.is_lost());
        // A late confirmation does not revive it.
        assert!(!lease.confirm(Instant::now(), Duration::from_secs(60)));
        assert!(lease.is_lost());
    }

    #[test]
    fn confirmation_moves_the_deadline() {
        let sent = Instant::now();
        let lease = Lease::new(sent, Duration::from_secs(1), None);
        let later = sent + Duration::from_millis(500);
        assert!(lease.confirm(later, Duration::from_secs(10)));
        assert_eq!(lease.schedule(), (Duration::from_secs(10), later));
        assert!(lease.valid_until() > sent + Duration::from_secs(9));
    }

    #[test]
    fn wait_lost_returns_at_the_deadline_or_when_marked() {
        let lease = Lease::new(Instant::now(), Duration::from_millis(50), None);
        assert!(lease.wait_lost(Instant::now() + Duration::from_secs(60)));
        let lease = std::sync::Arc::new(Lease::new(Instant::now(), Duration::from_secs(60), None));
        assert!(!lease.wait_lost(Instant::now()));
        let waiter = {
            let lease = std::sync::Arc::clone(&lease);
            std::thread::Builder::new()
                .spawn(move || lease.wait_lost(Instant::now() + Duration::from_secs(3600)))
                .unwrap()
        };
        lease.mark_lost();
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn no_renewal_runs_after_stop() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(60), None);
        assert_eq!(lease.serialized(|| 1), Some(1));
        lease.stop();
        assert_eq!(
            lease.serialized(|| panic!("renewed after stop")),
            None::<()>
        );
    }

    #[test]
    fn stop_waits_for_a_renewal_in_flight() {
        use std::sync::mpsc;
        let lease = std::sync::Arc::new(Lease::new(Instant::now(), Duration::from_secs(60), None));
        let (started_tx, started_rx) = mpsc::channel();
        let (finish_tx, finish_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let renewing = {
            let lease = std::sync::Arc::clone(&lease);
            std::thread::Builder::new()
                .spawn(move || {
                    lease.serialized(|| {
                        started_tx.send(()).unwrap();
                        finish_rx.recv().unwrap();
                        done_tx.send("renewal finished").unwrap();
                    })
                })
                .unwrap()
        };
        started_rx.recv().unwrap();
        let stopper = {
            let lease = std::sync::Arc::clone(&lease);
            std::thread::Builder::new()
                .spawn(move || lease.stop())
                .unwrap()
        };
        // `stop` cannot return while the renewal runs.
        finish_tx.send(()).unwrap();
        stopper.join().unwrap();
        assert_eq!(done_rx.try_recv(), Ok("renewal finished"));
        renewing.join().unwrap();
    }

    #[test]
    fn a_hurried_renewal_comes_sooner_and_backs_off() {
        let sent = Instant::now();
        let lease = Lease::new(sent, Duration::from_secs(30), None);
        assert_eq!(lease.renewal_due(), sent + Duration::from_secs(10));
        lease.hurry();
        let first = lease.renewal_due();
        assert!(first < sent + Duration::from_secs(1));
        lease.hurry();
        assert!(lease.renewal_due() > first);
        lease.unhurry();
        assert_eq!(lease.renewal_due(), sent + Duration::from_secs(10));
    }

    #[test]
    fn mark_lost_is_final() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(60), None);
        lease.mark_lost();
        assert!(lease.is_lost());
        assert!(!lease.confirm(Instant::now(), Duration::from_secs(60)));
    }
}

/// `RUSTFLAGS="--cfg loom" cargo test --release --lib loom`: every
/// interleaving of the watchdog, `extend`, `stop` and a waiter, within
/// loom's bounds.
#[cfg(all(test, loom))]
#[allow(clippy::unwrap_used)]
mod loom_tests {
    use super::*;
    use loom::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::Arc;

    const HOUR: Duration = Duration::from_secs(3600);

    fn lease() -> Arc<Lease> {
        Arc::new(Lease::new(Instant::now(), HOUR, None))
    }

    /// No renewal runs once `stop` has returned.
    #[test]
    fn loom_no_renewal_starts_after_stop() {
        loom::model(|| {
            let lease = lease();
            let stopped = Arc::new(AtomicBool::new(false));
            let watchdog = {
                let (lease, stopped) = (Arc::clone(&lease), Arc::clone(&stopped));
                loom::thread::spawn(move || {
                    lease.serialized(|| {
                        assert!(!stopped.load(Ordering::SeqCst), "a renewal ran after stop");
                    });
                })
            };
            lease.stop();
            stopped.store(true, Ordering::SeqCst);
            watchdog.join().unwrap();
        });
    }

    /// A loss marked while the holder waits for one always wakes it.
    #[test]
    fn loom_a_loss_always_wakes_wait_lost() {
        loom::model(|| {
            let lease = lease();
            let renewal = {
                let lease = Arc::clone(&lease);
                loom::thread::spawn(move || lease.mark_lost())
            };
            assert!(lease.wait_lost(Instant::now() + HOUR));
            renewal.join().unwrap();
        });
    }

    /// A failed renewal while a holder waits for the state to leave
    /// `Held`, then a confirmed one while it waits to leave `InDoubt`: each
    /// change always wakes it, and the callback's record has both changes,
    /// once, in order, whichever thread drains it and when.
    #[test]
    fn loom_each_change_wakes_wait_change_and_is_recorded_once() {
        loom::model(|| {
            let lease = lease();
            lease.watch("k", Some(state::OnChange::new(|_| {})), true);
            let drain = |lease: &Lease| lease.take_changes().1.map(|(_, c)| c).unwrap_or_default();
            let failed = {
                let lease = Arc::clone(&lease);
                loom::thread::spawn(move || {
                    lease.note_failed();
                    drain(&lease)
                })
            };
            let seen = lease.wait_change(LeaseState::Held, Instant::now() + HOUR);
            assert_eq!(seen, LeaseState::InDoubt);
            let mut told = failed.join().unwrap();
            let confirmed = {
                let lease = Arc::clone(&lease);
                loom::thread::spawn(move || assert!(lease.confirm(Instant::now(), HOUR)))
            };
            let seen = lease.wait_change(LeaseState::InDoubt, Instant::now() + HOUR);
            assert_eq!(seen, LeaseState::Held);
            confirmed.join().unwrap();
            told.extend(drain(&lease));
            let pairs: Vec<_> = told.iter().map(|c| (c.from(), c.to())).collect();
            assert_eq!(
                pairs,
                [
                    (LeaseState::Held, LeaseState::InDoubt),
                    (LeaseState::InDoubt, LeaseState::Held)
                ]
            );
        });
    }

    /// The watchdog's renewal, reading the TTL to renew for, and `extend`
    /// to two hours: whichever runs last, the lease keeps the extended TTL.
    fn renewal_and_extend(ttl_read_inside: bool) {
        loom::model(move || {
            let lease = lease();
            let watchdog = {
                let lease = Arc::clone(&lease);
                loom::thread::spawn(move || {
                    let early = lease.schedule().0;
                    lease.serialized(|| {
                        let ttl = if ttl_read_inside {
                            lease.schedule().0
                        } else {
                            early
                        };
                        lease.confirm(Instant::now(), ttl);
                    });
                })
            };
            lease.serialized(|| lease.confirm(Instant::now(), 2 * HOUR));
            watchdog.join().unwrap();
            assert_eq!(lease.schedule().0, 2 * HOUR, "a renewal undid extend");
        });
    }

    #[test]
    fn loom_a_renewal_never_undoes_extend() {
        renewal_and_extend(true);
    }

    /// The negative control: the old watchdog read the TTL before its
    /// serialized section, and loom finds the interleaving that undoes
    /// `extend`.
    #[test]
    #[should_panic(expected = "a renewal undid extend")]
    fn loom_finds_the_old_ttl_race() {
        renewal_and_extend(false);
    }
}
