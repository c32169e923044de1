//! The renewal thread of one guard, and its handle. Nothing else renews.
//!
//! The thread renews every `ttl / 3`, counted from when the last confirmed
//! renewal was *sent*. It starts when the first renewal is due (see
//! `workers::run_at`): a guard gone before then never needed one. A renewal is owner-checked in Redis; what it reports
//! decides everything:
//!
//! - confirmed: the lease's deadline moves forward;
//! - not ours (key gone, other owner, other type): the lease is lost and the
//!   thread ends;
//! - an error (timeout, connection refused...): retried every `ttl / 10`
//!   (a hand-over's claim not taken up yet: every tenth of the claim)
//!   while the lease is still valid; when the deadline passes first, the
//!   lease is lost and the thread ends.
//!
//! A hand-over's claim returned before its take-up (`TakeUp::Behind`) has
//! its first renewal due at once: the thread starts a millisecond after
//! the guard is built (`FIRST_RENEWAL_AFTER`), and that renewal takes the
//! lease up to the TTL.
//!
//! The thread holds no reference to the guard. Dropping the handle stops the
//! lease (`Lease::stop`: no renewal starts after it returns, and one in
//! flight is waited for) and disconnects the channel, which ends the loop at
//! its next wait. So no renewal happens after the guard is gone, and the
//! guard never waits for the thread itself: it comes from the pool of parked
//! workers (`workers.rs`) and parks again on its own.

use std::io;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lease::state::LeaseState;
use crate::lease::workers;
use crate::lease::Lease;

/// The least time between a guard's watchdog start and its first renewal,
/// which only a hand-over's take-up (due at once) ever comes near. Its
/// call returns first: a worker woken at once would share the caller's CPU
/// (where they share one) for the renewal's own work before the call
/// returns; and a guard released within it (a short critical section,
/// common where locks are handed over) never needs its take-up, which
/// costs the server a script and the client a thread. A millisecond is
/// nothing next to a claim of seconds. Measured pinned against a take-up
/// at once (6 rounds, a loaded machine): the hand-over's p50 0.76x,
/// 4 workers with 0 ms sections 1.24x the acquisitions.
const FIRST_RENEWAL_AFTER: Duration = Duration::from_millis(1);

/// What one renewal round trip found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Confirmed and recorded in the lease.
    Confirmed,
    /// The lease is lost for good (Redis said so, or the deadline passed).
    Lost,
    /// No answer or an error; the lease may still be ours.
    Failed,
    /// The guard is gone: nothing was sent.
    Stopped,
}

/// Messages from the guard to its watchdog.
#[derive(Debug)]
enum Msg {
    /// The TTL changed (`extend`): recompute the next renewal time.
    Reschedule,
    /// The guard's caller changed the lease's state (a loss or a failure
    /// found by `extend`, `run_if_held`...): tell the callback now, not at
    /// the next renewal.
    Tell,
}

/// The guard's handle on its watchdog thread.
#[derive(Debug)]
pub(crate) struct Watchdog {
    lease: Arc<Lease>,
    tx: Option<Sender<Msg>>,
    /// The job's id with the starter, until it starts.
    job: u64,
}

impl Watchdog {
    /// Starts a watchdog for `lease`; `renew()` performs one owner-checked
    /// renewal with the lease's TTL (read in its serialized section, so a
    /// concurrent `extend` is never undone) and records its outcome in the
    /// lease.
    /// `key` names the lock in the log event of a lease that runs out.
    pub(crate) fn start<F>(lease: Arc<Lease>, key: String, renew: F) -> io::Result<Self>
    where
        F: FnMut() -> Renewal + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        let handle_lease = Arc::clone(&lease);
        let at = first_renewal(&lease).max(Instant::now() + FIRST_RENEWAL_AFTER);
        let job = workers::run_at(at, move || run(&lease, &key, &rx, renew))?;
        Ok(Watchdog {
            lease: handle_lease,
            tx: Some(tx),
            job,
        })
    }

    /// Tells the thread the TTL changed (starting it sooner if it has not
    /// started yet and the next renewal now comes sooner).
    pub(crate) fn reschedule(&self) {
        workers::advance(self.job, first_renewal(&self.lease));
        if let Some(tx) = &self.tx {
            // A send fails only when the thread has ended; nothing to do then.
            let _ = tx.send(Msg::Reschedule);
        }
    }

    /// Tells the callback the lease's changes not told yet, on the
    /// watchdog's thread, now rather than at its next wake-up (starting
    /// the thread if it has not started yet and there is something to
    /// tell). For a change the guard's caller made.
    pub(crate) fn poke(&self) {
        if !self.lease.has_untold() {
            return;
        }
        workers::advance(self.job, Instant::now());
        if let Some(tx) = &self.tx {
            // A send fails only when the thread has ended; nothing to do then.
            let _ = tx.send(Msg::Tell);
        }
    }
}

/// Dropping the handle stops renewing: no renewal starts after the drop
/// returns (one in flight is waited for), and the thread is told to end.
/// Changes made before the drop and not told yet are told by the thread
/// as it ends (started now if it had not started: a loss found just
/// before the drop is not left untold).
impl Drop for Watchdog {
    fn drop(&mut self) {
        self.lease.stop();
        if self.lease.has_untold() {
            workers::advance(self.job, Instant::now());
        } else {
            workers::cancel(self.job);
        }
        self.tx = None;
    }
}

fn run<F>(lease: &Lease, key: &str, rx: &mpsc::Receiver<Msg>, mut renew: F)
where
    F: FnMut() -> Renewal,
{
    let mut next = first_renewal(lease);
    // False once a renewal was refused for good (the max hold, or the
    // guard gone): the thread then only tells the lease's changes until
    // it is lost (or the guard goes).
    let mut renewing = true;
    loop {
        let wake = lease.next_change_at().map_or(next, |at| at.min(next));
        match rx.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok(Msg::Reschedule) => {
                next = first_renewal(lease);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => {
                tell(lease);
                return;
            }
            // Told below, as after any wake-up.
            Ok(Msg::Tell) | Err(RecvTimeoutError::Timeout) => {}
        }
        if tell(lease) == LeaseState::Lost {
            if lease.valid_until() <= Instant::now() {
                lease.log_lost(key);
            }
            return;
        }
        if !renewing || Instant::now() < next {
            // Woken for a change of state only.
            continue;
        }
        match renew() {
            Renewal::Confirmed => next = first_renewal(lease),
            Renewal::Lost => {
                tell(lease);
                return;
            }
            Renewal::Stopped => {
                renewing = false;
                next = lease.valid_until();
            }
            Renewal::Failed => {
                let until = lease.valid_until();
                let retry = Instant::now().checked_add(lease.retry_pause());
                // Wake at the deadline at the latest, to mark the loss.
                next = retry.map_or(until, |r| r.min(until));
            }
        }
        tell(lease);
    }
}

/// Gives the builder's callback, if any, the lease's changes it has not
/// had yet, in order, on this thread; returns the state they end in. A
/// panic in the callback is caught (see `OnChange::call`). A call that
/// takes a tenth of the TTL or more is logged at `warn`: the lease is not
/// renewed while it runs, and a loss it causes would otherwise read only
/// as a renewal not confirmed in time.
fn tell(lease: &Lease) -> LeaseState {
    let (state, changes) = lease.take_changes();
    if let Some((on_change, changes)) = changes {
        let slow = lease.schedule().0 / 10;
        for change in &changes {
            let start = Instant::now();
            on_change.call(change);
            let took = start.elapsed();
            if took >= slow {
                log::warn!(
                    target: "redmutex::lease",
                    "lock {:?}: the lease-change callback ran for {took:?} on {} -> {}; \
                     the lease is not renewed while it runs (keep it quick)",
                    change.key(),
                    change.from(),
                    change.to()
                );
            }
        }
    }
    state
}

/// A third of the granted TTL after the last confirmed request was sent.
fn first_renewal(lease: &Lease) -> Instant {
    lease.renewal_due()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn lease(ttl_ms: u64) -> Arc<Lease> {
        Arc::new(Lease::new(
            Instant::now(),
            Duration::from_millis(ttl_ms),
            None,
        ))
    }

    #[test]
    fn renews_until_dropped_and_never_after() {
        let l = lease(60);
        let count = Arc::new(AtomicU32::new(0));
        let (seen_tx, seen_rx) = mpsc::channel();
        let dog = {
            let (l2, count) = (Arc::clone(&l), Arc::clone(&count));
            // As `RawLock::renew` does: the renewal runs inside `serialized`.
            Watchdog::start(Arc::clone(&l), String::new(), move || {
                l2.serialized(|| {
                    let (ttl, _) = l2.schedule();
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = seen_tx.send(());
                    if l2.confirm(Instant::now(), ttl) {
                        Renewal::Confirmed
                    } else {
                        Renewal::Lost
                    }
                })
                .unwrap_or(Renewal::Stopped)
            })
            .unwrap()
        };
        for _ in 0..5 {
            seen_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        drop(dog);
        let after = count.load(Ordering::SeqCst);
        assert!(after >= 5);
        // The loop ends on its own (its closure, holding the sender, goes)...
        while seen_rx.recv_timeout(Duration::from_secs(10)).is_ok() {}
        // ...and no renewal ran after the drop returned.
        assert_eq!(count.load(Ordering::SeqCst), after);
        assert!(!l.is_lost());
    }

    #[test]
    fn stops_for_good_when_lost() {
        let l = lease(30);
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let dog = {
            let l2 = Arc::clone(&l);
            Watchdog::start(Arc::clone(&l), String::new(), move || {
                let _keep = &done_tx;
                l2.mark_lost();
                Renewal::Lost
            })
            .unwrap()
        };
        // The closure (holding done_tx) is dropped when the thread ends.
        assert!(matches!(
            done_rx.recv_timeout(Duration::from_secs(10)),
            Err(RecvTimeoutError::Disconnected)
        ));
        assert!(l.is_lost());
        drop(dog);
    }

    #[test]
    fn failures_until_the_deadline_lose_the_lease() {
        let l = lease(30);
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let _dog = Watchdog::start(Arc::clone(&l), String::new(), move || {
            let _keep = &done_tx;
            Renewal::Failed
        })
        .unwrap();
        assert!(matches!(
            done_rx.recv_timeout(Duration::from_secs(10)),
            Err(RecvTimeoutError::Disconnected)
        ));
        assert!(l.is_lost());
    }
}
