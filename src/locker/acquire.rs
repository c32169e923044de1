//! How a `Locker` acquires: one attempt, or the one acquire loop (the
//! waiter's place in the queue and its stay, the backoff, the wake-ups and
//! the hand-over), and a grant turned into a guard. `Locker`'s API, in
//! `locker.rs`, and the other primitives' handles come here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::jitter_seed;
use crate::config::waiter_stay;
use crate::defaults::{MAX_QUEUED_PAUSE, MAX_TTL};
use crate::guard::Guard;
use crate::lease::{Lease, TakeUp};
use crate::raw::{Acquisition, Outcome, Queue};
use crate::time;
use crate::Error;

use super::Locker;

impl Locker {
    pub(super) fn try_acquire(&self, keys: &[&str]) -> Result<Option<Guard>, Error> {
        self.try_acquisition(self.shared.prepare(keys)?)
    }

    /// One attempt of a prepared acquisition (a lock's or a permit's).
    pub(crate) fn try_acquisition(&self, acquisition: Acquisition) -> Result<Option<Guard>, Error> {
        self.shared.refuse_self_wait(&acquisition)?;
        let asked = Instant::now();
        let acquisition = Arc::new(acquisition);
        let queue = self.shared.queue_mode(&acquisition, Queue::Respect);
        match self.shared.acquire(&acquisition, queue)? {
            Outcome::Granted { sent, fence } => {
                let guard = self.grant(acquisition, sent, fence)?;
                self.shared.stats.granted(&guard, asked, false);
                Ok(Some(guard))
            }
            Outcome::Busy { .. } => {
                self.shared.stats.busy();
                Ok(None)
            }
        }
    }

    /// The acquire loop: attempts until granted, or until `wait` (None: no
    /// limit) or the backoff's attempt limit runs out.
    pub(super) fn acquire_waiting(
        &self,
        keys: &[&str],
        wait: Option<Duration>,
        stop: Option<&AtomicBool>,
    ) -> Result<Guard, Error> {
        self.wait_for(self.shared.prepare(keys)?, wait, stop)
    }

    /// The acquire loop of a prepared acquisition (a lock's or a permit's).
    pub(crate) fn wait_for(
        &self,
        acquisition: Acquisition,
        wait: Option<Duration>,
        stop: Option<&AtomicBool>,
    ) -> Result<Guard, Error> {
        self.shared.refuse_self_wait(&acquisition)?;
        let start = Instant::now();
        let acquisition = Arc::new(acquisition);
        // The key errors and log events name (the first, for several).
        let names = Arc::clone(&acquisition.caller_keys);
        let first = names.first().map_or("", String::as_str);
        let deadline = wait.and_then(|w| time::deadline(start, w));
        let backoff = self.shared.config.backoff;
        let watched = Arc::clone(acquisition.keys.watched());
        let mine = Arc::clone(&acquisition);
        let watch = self.shared.signal().watch(&watched, mine.token.as_str());
        // A queued waiter's place lasts until its next call could come,
        // plus that call's way to the server; a call comes at least every
        // MAX_QUEUED_PAUSE, whatever the backoff (see `waiter_stay`).
        let config = &self.shared.config;
        let stay = waiter_stay(&backoff, config.checkout_timeout, config.io_timeout);
        let queue = self.shared.queue_mode(&acquisition, Queue::Join(stay));
        let claim = self.shared.claim(stay);
        // A queued waiter calls at least this often: a pause of its backoff
        // that is longer is cut into calls that only refresh its place.
        let refresh_every = (queue != Queue::Ignore).then_some(MAX_QUEUED_PAUSE);
        // When the backoff's next attempt is due, while refreshes come first.
        let mut due: Option<Instant> = None;
        let mut attempts: u32 = 0;
        // When the last attempt answered was sent (a lock handed over to
        // us later counts its lease from there), and, while attempts are
        // refused in passing, since when and the last refusal.
        let mut answered = start;
        let mut refused: Option<(Instant, Error)> = None;
        loop {
            let seen = watch.current();
            // A call made only to refresh the waiter's place is no attempt.
            if due.is_none_or(|d| Instant::now() >= d) {
                due = None;
                attempts = attempts.saturating_add(1);
            }
            let outcome = match self.shared.acquire(&acquisition, queue) {
                Ok(outcome) => {
                    refused = None;
                    outcome
                }
                // Nothing ran: waited out as a busy lock, for a TTL at most.
                Err(e)
                    if in_passing(&e)
                        && refused.as_ref().is_none_or(|r| r.0.elapsed() < config.ttl) =>
                {
                    refused = Some((refused.map_or_else(Instant::now, |r| r.0), e));
                    Outcome::Busy {
                        holder_ttl: None,
                        delay: None,
                        sent: answered,
                    }
                }
                Err(e) => {
                    // Leave the queue, so that no release hands the lock to
                    // a waiter that has gone; not when the server just did
                    // not answer in time (leaving would cost another
                    // timeout, and the place, with a lock handed to it,
                    // ends with the stay anyway).
                    if queue != Queue::Ignore && !timed_out(&e) {
                        self.shared.dequeue(&acquisition);
                    }
                    return Err(e);
                }
            };
            let (holder_ttl, delay, sent) = match outcome {
                Outcome::Granted { sent, fence } => {
                    if attempts > 1 {
                        waited(first, "acquired", attempts, start);
                    }
                    let guard = self.grant(acquisition, sent, fence)?;
                    self.shared.stats.granted(&guard, start, false);
                    return Ok(guard);
                }
                Outcome::Busy {
                    holder_ttl,
                    delay,
                    sent,
                } => (holder_ttl, delay, sent),
            };
            answered = sent;
            let now = Instant::now();
            let out_of_time = deadline.is_some_and(|d| now >= d);
            let out_of_attempts = backoff.attempt_limit().is_some_and(|n| attempts >= n);
            let stopped = stop.is_some_and(|s| s.load(Ordering::SeqCst));
            if out_of_time || out_of_attempts || stopped {
                if queue != Queue::Ignore {
                    // Frees a lock handed over to us in the meantime.
                    self.shared.dequeue(&acquisition);
                }
                if stopped {
                    return Err(Error::Cancelled {
                        key: first.to_owned(),
                    });
                }
                // The wait ended while the cluster refused: that is why.
                if let Some((_, e)) = refused {
                    return Err(e);
                }
                self.shared.stats.timed_out(&*acquisition);
                return Err(Error::Timeout {
                    key: first.to_owned(),
                    waited: start.elapsed(),
                    attempts,
                });
            }
            if self.shared.ensure_listening(&acquisition) {
                // The listener just came up: a release may have slipped by.
                continue;
            }
            // The backoff's next attempt (kept while refreshes come first).
            let mut next = due.unwrap_or_else(|| {
                let pause = backoff.delay(attempts - 1, jitter_seed()).min(MAX_TTL);
                time::deadline(now, pause).unwrap_or(now)
            });
            if let Some(left) = delay {
                // A lock-delay: nobody is granted the lock before it ends,
                // so come back right then, not at the backoff's pace.
                let ends = left.saturating_add(Duration::from_millis(1)).min(MAX_TTL);
                next = time::deadline(now, ends).unwrap_or(now);
            }
            if let Some(ttl) = holder_ttl {
                // Retry right when the holder's lease would have run out.
                let ends = ttl.saturating_add(Duration::from_millis(1)).min(MAX_TTL);
                next = next.min(time::deadline(now, ends).unwrap_or(now));
            }
            let mut wake = next;
            due = None;
            if let Some(refresh) = refresh_every.and_then(|r| time::deadline(now, r)) {
                if refresh < next && deadline.is_none_or(|d| refresh < d) {
                    wake = refresh;
                    due = Some(next);
                }
            }
            if let Some(d) = deadline {
                wake = wake.min(d);
            }
            watch.wait_until(seen, wake);
            if let Some(fence) = watch.take_handed() {
                // A release gave us the lock after the attempt above, as a
                // claim. When it cannot be taken as it is, the next attempt
                // finds it ours and takes it up.
                if self.shared.takes_handed(&acquisition, fence, sent, claim) {
                    waited(first, "handed over", attempts, start);
                    if self.shared.takes_up_behind(&acquisition) {
                        // Returned at once; its watchdog takes it up.
                        let lease = self.claim_lease(sent, claim, TakeUp::Behind);
                        let guard = self.guard(acquisition, fence, lease)?;
                        self.shared.stats.granted(&guard, start, true);
                        return Ok(guard);
                    }
                    match self.take_up(Arc::clone(&acquisition), sent, fence, claim) {
                        // The claim ran out before the take-up was
                        // confirmed (a slow round trip); the guard's drop
                        // freed it. Wait on, as if it was never handed over,
                        // unless asked to stop or out of time meanwhile (the
                        // hand-over took us out of the queue: nothing to leave).
                        Err(Error::Lost { .. }) => {
                            if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                                return Err(Error::Cancelled {
                                    key: first.to_owned(),
                                });
                            }
                            if deadline.is_some_and(|d| Instant::now() >= d) {
                                self.shared.stats.timed_out(&*acquisition);
                                return Err(Error::Timeout {
                                    key: first.to_owned(),
                                    waited: start.elapsed(),
                                    attempts,
                                });
                            }
                            continue;
                        }
                        taken => {
                            if let Ok(guard) = &taken {
                                self.shared.stats.granted(guard, start, true);
                            }
                            return taken;
                        }
                    }
                }
            }
        }
    }

    /// Turns a granted acquisition into a guard, starting its watchdog.
    fn grant(&self, a: Arc<Acquisition>, sent: Instant, fence: u64) -> Result<Guard, Error> {
        let config = &self.shared.config;
        self.guard(a, fence, Lease::new(sent, config.ttl, config.drift))
    }

    /// The lease of a lock handed over as a claim of `claim`, counted from
    /// `sent`, taken up to the TTL `when` says.
    fn claim_lease(&self, sent: Instant, claim: Duration, when: TakeUp) -> Lease {
        let config = &self.shared.config;
        Lease::claimed(sent, claim, config.ttl, config.drift, when)
    }

    /// Turns a lock handed over to `a` (a claim of `claim`, counted from
    /// `sent`) into a guard, and takes it up to the full TTL with one
    /// renewal before returning it, where it cannot be taken up behind its
    /// return (see `RawLock::takes_up_behind`). When that renewal fails,
    /// the guard is dropped (its keys deleted if still ours) and the error
    /// returned; the caller waits on after [`Error::Lost`] (the claim ran
    /// out first).
    fn take_up(
        &self,
        a: Arc<Acquisition>,
        sent: Instant,
        fence: u64,
        claim: Duration,
    ) -> Result<Guard, Error> {
        let config = &self.shared.config;
        let lease = self.claim_lease(sent, claim, TakeUp::Before);
        let mut guard = self.guard(a, fence, lease)?;
        // A take-up that fails is no grant: its hold and loss are not counted.
        guard.count_in_stats(false);
        guard.extend(config.ttl)?;
        guard.count_in_stats(true);
        Ok(guard)
    }

    /// The guard of `a`, granted with `fence` and `lease` (its watchdog
    /// started, if on).
    fn guard(&self, a: Arc<Acquisition>, fence: u64, lease: Lease) -> Result<Guard, Error> {
        let a = a.granted_permit()?;
        if self.shared.config.watchdog {
            self.shared.reserve_for_renewals();
        }
        Guard::new(Arc::clone(&self.shared), a, fence, Arc::new(lease))
    }
}

/// Whether a call failed because the server did not answer in time (or
/// no pooled connection came): another call would most likely wait as long.
fn timed_out(e: &Error) -> bool {
    match e {
        Error::Pool(_) => true,
        Error::Redis(e) => e.is_timeout(),
        _ => false,
    }
}

/// Whether an attempt was refused by a Redis Cluster for a moment, with
/// nothing run: the slot of its keys in migration (see
/// [`slot_moving`](crate::conn::slot_moving)), or the cluster down while a
/// master fails over (`CLUSTERDOWN`). The wait goes on as if the lock were
/// busy, within its bound, and for a TTL at most (a holder's renewals are
/// refused alike, and its lease lost after that): redis-rs's cluster
/// client, whose retries a `cluster_pool` cuts to one, used to wait them
/// out below the locker.
fn in_passing(e: &Error) -> bool {
    crate::conn::slot_moving(e) || matches!(e, Error::Redis(r) if r.code() == Some("CLUSTERDOWN"))
}

/// The log event of a lock had after waiting: `how` (acquired, or handed
/// over) after `attempts`, counted from `start`.
fn waited(key: &str, how: &str, attempts: u32, start: Instant) {
    log::debug!(
        target: "redmutex::acquire",
        "lock {key:?} {how} after {attempts} attempts in {:?}",
        start.elapsed()
    );
}
