//! A lock that a release handed over to a waiter of this locker: whether
//! the waiter takes it as granted without an attempt, whether it is
//! returned at once and taken up behind, and the claim it comes with.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::protocol::keys::Hold;
use crate::time;

use super::{Acquisition, RawLock};

impl RawLock {
    /// Whether a lock handed over to `a`, with fencing token `fence`, may be
    /// taken as granted without an attempt: it was handed over after the
    /// latest refused attempt (sent at `sent`), whose claim (see
    /// [`RawLock::claim`]) then still has most of its length, and no replica
    /// must acknowledge it first.
    pub(crate) fn takes_handed(
        &self,
        a: &Acquisition,
        fence: u64,
        sent: Instant,
        claim: Duration,
    ) -> bool {
        // A permit handed over is taken up by the next attempt, which says
        // which permit it is; of a read-write lock, only the writer key is
        // handed over (to a writer).
        matches!(
            a.keys.hold,
            Hold::Lock | Hold::Write { .. } | Hold::Leader { .. }
        ) && self.config.min_replicas == 0
            && fence > a.floor.load(Ordering::SeqCst)
            && sent.elapsed() < claim / 3
    }

    /// Whether a claim handed over to `a` is returned to its caller at once,
    /// held until the claim's deadline, and taken up to the TTL by its
    /// guard's watchdog right after (no round trip of the waiter's own
    /// between the announcement and the return), rather than taken up
    /// before it is returned. It is, but: without a watchdog (nothing would
    /// take it up); with a lock-delay (a claim has no lock-delay mark until
    /// its take-up writes one, so a claim returned before it and ended by a
    /// pause would let the next holder in without the delay); and for an
    /// election's candidate (its campaign's announcement, which follows,
    /// tells observers of a leader whose key has its full TTL).
    pub(crate) fn takes_up_behind(&self, a: &Acquisition) -> bool {
        matches!(a.keys.hold, Hold::Lock | Hold::Write { .. })
            && self.config.watchdog
            && self.lock_delay(&a.keys).is_zero()
    }

    /// The claim a release hands over to a waiter that stays queued for
    /// `stay`: the TTL or the stay, whichever is shorter, in whole
    /// milliseconds as the scripts see them.
    pub(crate) fn claim(&self, stay: Duration) -> Duration {
        let ms = time::millis_ceil(stay)
            .max(1)
            .min(time::millis_ceil(self.config.ttl));
        Duration::from_millis(ms)
    }
}
