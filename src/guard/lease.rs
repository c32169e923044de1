//! A guard's lease, as its holder sees it: the deadline, lost or not and
//! why, held or in doubt, and the gates a writer checks (`ensure_held`,
//! `ensure_confirmed`), and a loss the holder's own call found. No round
//! trip but there: the watchdog keeps the lease.

use std::time::{Duration, Instant};

use super::{Guard, Held};
use crate::lease::state::LeaseState;
use crate::lease::Lease;
use crate::Error;

impl Guard {
    /// The local deadline of the lease: the moment the acquire (or the last
    /// confirmed renewal) was *sent*, plus the TTL, minus a drift allowance of
    /// 1 % of the TTL plus 2 ms. Renewals and [`extend`](Guard::extend) move it
    /// forward.
    ///
    /// After a hand-over it is first the claim's: a lock handed over by a
    /// release is only a short claim (the waiter's stay, 2.3 s with the
    /// defaults, counted here from the waiter's last attempt) until the
    /// guard's watchdog takes it up to the full TTL with one renewal, sent
    /// a millisecond after `lock` returns (a guard released sooner never
    /// needs it), so that `lock` waits for no round trip after the
    /// release's announcement. Until that renewal is confirmed (a
    /// millisecond and a round trip later) the lease is [`Held`](crate::LeaseState::Held)
    /// with the claim's deadline, and no renewal of it is overdue; a take-up
    /// that finds the lock gone makes it lost, and one that fails is tried
    /// again within the claim, the lease lost at the claim's deadline if
    /// none succeeds. A job that needs the full lease before it starts
    /// calls [`extend`](Guard::extend) first, as `redmutex run` does. With
    /// [`Builder::lock_delay`](crate::Builder::lock_delay), without a
    /// watchdog, and for an election's leadership, the acquiring call takes
    /// the claim up before it returns (one more round trip): the guard then
    /// starts with a full TTL, as after any other grant.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let guard = locker.lock("k")?;
    /// let left = guard.valid_until().saturating_duration_since(std::time::Instant::now());
    /// println!("promised for another {left:?}");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// True once the lease can no longer be promised: its deadline passed
    /// without a confirmed renewal, or Redis showed the key deleted, taken by
    /// another owner, or overwritten with another type. Once true, always
    /// true. Costs no round trip.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let guard = locker.lock("k")?;
    /// if guard.is_lost() {
    ///     eprintln!("lock lost: stop and roll back");
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Blocks until the lease is lost or `timeout` passes, and returns
    /// whether it is lost. A supervisor thread can use it to stop work the
    /// moment the lock is gone, instead of polling [`is_lost`](Guard::is_lost).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let guard = locker.lock("import")?;
    /// std::thread::scope(|s| {
    ///     s.spawn(|| {
    ///         if guard.wait_lost(Duration::from_secs(3600)) {
    ///             eprintln!("lost the import lock: cancelling");
    ///         }
    ///     });
    ///     // ... the import, checking guard.ensure_held() between steps ...
    /// # std::process::exit(0);
    /// });
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        // A century stands in for "forever" and always fits in an `Instant`.
        let timeout = timeout.min(Duration::from_secs(100 * 365 * 24 * 3600));
        match crate::time::deadline(Instant::now(), timeout) {
            Some(until) => self.lease.wait_lost(until),
            None => self.lease.is_lost(),
        }
    }

    /// Why the lease was lost, once it is ([`is_lost`](Guard::is_lost));
    /// `None` while it is not. `broken by an operator: <reason>` when an
    /// operator broke the hold ([`Locker::break_lock`](crate::Locker::break_lock)),
    /// learnt at the next renewal, or by whichever call of the holder's
    /// finds the hold gone first ([`extend`](Guard::extend),
    /// [`run_if_held`](Guard::run_if_held),
    /// [`Leadership::proclaim`](crate::Leadership::proclaim); the lease
    /// change's reason is then
    /// [`LeaseChangeReason::Broken`](crate::LeaseChangeReason::Broken));
    /// else that its deadline passed without
    /// a confirmed renewal, or that Redis showed the key gone or someone
    /// else's. The `redmutex::lease` error event says the same. Costs no
    /// round trip.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # use std::time::Duration;
    /// let guard = locker.lock("import")?;
    /// if guard.wait_lost(Duration::from_secs(3600)) {
    ///     eprintln!("lost the import lock: {}", guard.lost_reason().unwrap_or_default());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn lost_reason(&self) -> Option<String> {
        self.lease.lost_reason()
    }

    /// `Ok(())` while the lease can be promised, [`Error::Lost`] once
    /// [`is_lost`](Guard::is_lost) is true. Costs no round trip. A lease in
    /// doubt passes (its deadline has not passed); the stricter gate is
    /// [`ensure_confirmed`](Guard::ensure_confirmed), which says when to use
    /// which.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] once the lease is lost.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let guard = locker.lock("k")?;
    /// guard.ensure_held()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn ensure_held(&self) -> Result<(), Error> {
        if self.lease.is_lost() {
            Err(self.lost())
        } else {
            Ok(())
        }
    }

    /// Where the lease stands: [`LeaseState::Held`], [`LeaseState::InDoubt`]
    /// (the last renewal failed or is overdue, the deadline has not passed)
    /// or [`LeaseState::Lost`] (final). Costs no round trip.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let guard = locker.lock("k")?;
    /// println!("the lease is {}", guard.state()); // "held"
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn state(&self) -> LeaseState {
        self.lease.state()
    }

    /// Blocks until the lease's state differs from `seen`, or `timeout`
    /// passes, and returns the state then (`seen` itself at the timeout).
    /// Once the lease is lost it returns at once: `Lost` is final, so no
    /// change can come.
    /// A writer that found the lease in doubt waits here for it to be held
    /// again (or lost) instead of polling [`state`](Guard::state).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use redmutex::LeaseState;
    /// use std::time::Duration;
    /// let guard = locker.lock("ledger")?;
    /// let mut state = guard.state();
    /// while state == LeaseState::InDoubt {
    ///     // Paused: the next renewal decides.
    ///     state = guard.wait_state_change(state, Duration::from_secs(1));
    /// }
    /// guard.ensure_held()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn wait_state_change(&self, seen: LeaseState, timeout: Duration) -> LeaseState {
        // A century stands in for "forever" and always fits in an `Instant`.
        let timeout = timeout.min(Duration::from_secs(100 * 365 * 24 * 3600));
        match crate::time::deadline(Instant::now(), timeout) {
            Some(until) => self.lease.wait_change(seen, until),
            None => self.lease.state(),
        }
    }

    /// `Ok(())` only while the lease is [`Held`](LeaseState::Held): Redis
    /// confirmed the last renewal, and the next is not overdue. The gate of
    /// a cautious writer, who pauses while the lease is in doubt rather
    /// than write when Redis may have lost the key (a restart, a failover)
    /// and someone else may have it. Costs no round trip.
    ///
    /// Which to use: [`ensure_held`](Guard::ensure_held) before a step that
    /// is safe while the lease has not run out (the deadline is counted
    /// from a confirmed request, whatever happened since); `ensure_confirmed`
    /// before a step that must not run while the lock may be someone
    /// else's, where waiting a renewal or two is cheaper than a conflict.
    /// Neither replaces the [fencing token](Guard::fencing_token).
    ///
    /// # Errors
    ///
    /// [`Error::InDoubt`] while the lease is in doubt (it may come back);
    /// [`Error::Lost`] once it is lost.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let guard = locker.lock("ledger")?;
    /// loop {
    ///     match guard.ensure_confirmed() {
    ///         Ok(()) => break, // write now
    ///         Err(redmutex::Error::InDoubt { .. }) => {
    ///             guard.wait_state_change(redmutex::LeaseState::InDoubt, Duration::from_secs(1));
    ///         }
    ///         Err(e) => return Err(e.into()),
    ///     }
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ensure_confirmed(&self) -> Result<(), Error> {
        match self.lease.state() {
            LeaseState::Held => Ok(()),
            LeaseState::InDoubt => Err(Error::InDoubt {
                key: self.keys.first().cloned().unwrap_or_default(),
            }),
            LeaseState::Lost => Err(self.lost()),
        }
    }

    /// Has the watchdog tell the callback, now, the changes this guard's
    /// caller made to the lease (rather than at its next renewal, or never
    /// if the guard goes first).
    pub(crate) fn tell_changes(&self) {
        if let Some(dog) = self.held.as_ref().and_then(|h| h.watchdog.as_ref()) {
            dog.poke();
        }
    }

    /// Redis said a key is no longer ours (an owner-checked script of the
    /// caller's found it gone or someone else's): the lease is lost for
    /// good, at once, logged as the watchdog logs a loss, counted, and
    /// told, as broken when an operator broke it (one more round trip
    /// reads whether one did).
    pub(crate) fn note_lost(&self) {
        if self.lease.is_lost() {
            return; // told already
        }
        match &self.held {
            Some(held) => {
                let why = held.shared.why_lost(&held.acquisition);
                held.found_lost(&self.lease, why);
            }
            None => self.lease.mark_lost(),
        }
        self.lease
            .log_lost(self.keys.first().map_or("", String::as_str));
        self.tell_changes();
    }
}

impl Held {
    /// A call of the holder's found its keys no longer its own: the lease
    /// is lost for good, counted (unless this guard is not, a take-up) as
    /// broken by an operator saying `why` if one did, else as not ours.
    pub(super) fn found_lost(&self, lease: &Lease, why: Option<String>) {
        if self.counted {
            self.shared.lost_for(&self.acquisition, lease, why);
        } else if let Some(reason) = why {
            lease.mark_broken(&reason);
        } else {
            lease.mark_lost();
        }
    }
}
