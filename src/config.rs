//! The frozen `Config` a built locker keeps, the [`Topology`] decided once
//! from the servers, and the checks every duration a caller gives passes.

use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::defaults::{MAX_QUEUED_PAUSE, MAX_STAY_SLACK, MAX_TTL};
use crate::lease::state::OnChange;
use crate::protocol::keys::KeySpace;
use crate::time;
use crate::Error;

/// The settings of a built locker, frozen.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) topology: Topology,
    /// A fixed drift allowance, or `None` for 1 % of the TTL plus 2 ms.
    pub(crate) drift: Option<Duration>,
    pub(crate) min_replicas: u64,
    pub(crate) replica_timeout: Duration,
    pub(crate) keys: KeySpace,
    pub(crate) ttl: Duration,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) backoff: Backoff,
    pub(crate) watchdog: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) metadata: String,
    /// Grants and releases go to the audit trail too (breaks always do).
    pub(crate) audit: bool,
    /// The callback told of every guard's lease changes.
    pub(crate) on_lease_change: Option<OnChange>,
    pub(crate) checkout_timeout: Duration,
    pub(crate) io_timeout: Duration,
    /// Live figures recorded (`Builder::stats`).
    pub(crate) stats: bool,
    /// Test-only: how fast this machine's clock runs for Redlock proposals.
    pub(crate) clock_ahead: Duration,
    /// How long a lease that ended without a release keeps its keys from
    /// everyone (zero: no lock-delay).
    pub(crate) lock_delay: Duration,
}

/// What the servers behind a locker are, decided once when it is built.
/// Everything a topology does differently is asked of it here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Topology {
    /// How many independent instances: several is Redlock.
    pub(crate) instances: usize,
    /// Any instance is a Redis Cluster.
    pub(crate) cluster: bool,
}

impl Topology {
    /// Several independent masters, each lock on a majority of them.
    pub(crate) fn is_redlock(self) -> bool {
        self.instances > 1
    }

    /// Per-slot counters and queues, and every script's keys in one slot.
    pub(crate) fn is_cluster(self) -> bool {
        self.cluster
    }

    /// Releases are announced on a channel that waiters listen to: one
    /// server or a cluster (there on the shard channel of the lock's slot:
    /// see [`Topology::shards`]), not Redlock.
    pub(crate) fn announces(self) -> bool {
        self.instances == 1
    }

    /// Releases are announced with sharded pub/sub (`SPUBLISH` on a
    /// channel in the lock's slot, `SSUBSCRIBE` on the node that owns it),
    /// so that no announcement leaves the lock's shard (only the shard's
    /// replicas get it over the cluster bus): a cluster.
    pub(crate) fn shards(self) -> bool {
        self.instances == 1 && self.cluster
    }

    /// Waiters on a lock of `keys` keys queue, first come, first served:
    /// single-key locks on one server or a cluster.
    pub(crate) fn queues(self, keys: usize) -> bool {
        keys == 1 && self.instances == 1
    }

    /// The most a checkout or a call may take: in Redlock, a dead or hung
    /// instance may cost only a tenth of the lease.
    pub(crate) fn timeout_cap(self, ttl: Duration) -> Duration {
        if self.is_redlock() {
            (ttl / 10).max(Duration::from_millis(1))
        } else {
            Duration::MAX
        }
    }
}

/// A lease length must be at least 1 ms, leave something after the drift
/// allowance, and fit Redis and `Instant`.
pub(crate) fn validate_ttl(ttl: Duration, drift: Option<Duration>) -> Result<(), Error> {
    let allowance = time::drift(ttl, drift);
    if ttl < Duration::from_millis(1) {
        return Err(Error::InvalidInput(format!(
            "ttl {ttl:?} is below one millisecond"
        )));
    }
    if ttl <= allowance {
        return Err(Error::InvalidInput(format!(
            "ttl {ttl:?} does not exceed its clock-drift allowance of {allowance:?}"
        )));
    }
    if ttl > MAX_TTL {
        return Err(Error::InvalidInput(format!(
            "ttl {ttl:?} is above the maximum of {MAX_TTL:?}"
        )));
    }
    Ok(())
}

/// A wait must not exceed [`MAX_TTL`] (about 4,400 years: longer means
/// forever to any caller, and a timeout that long still fits every number
/// sent to Redis), and must be representable as a deadline from now.
pub(crate) fn validate_wait(what: &str, wait: Duration) -> Result<(), Error> {
    if wait > MAX_TTL {
        return Err(Error::InvalidInput(format!(
            "{what} {wait:?} is above the maximum of {MAX_TTL:?}"
        )));
    }
    match time::deadline(Instant::now(), wait) {
        Some(_) => Ok(()),
        None => Err(Error::InvalidInput(format!(
            "{what} {wait:?} is too large to represent"
        ))),
    }
}

/// How long a queued waiter keeps its place after each call (its *stay*):
/// its longest pause between calls (its backoff's, at most
/// [`MAX_QUEUED_PAUSE`]) plus the time its next call may take to reach the
/// server (checkout and I/O timeouts, at most [`MAX_STAY_SLACK`]). So a
/// dead waiter blocks a free lock for at most 3 s, whatever its settings.
pub(crate) fn waiter_stay(backoff: &Backoff, checkout: Duration, io: Duration) -> Duration {
    let pause = backoff.longest().min(MAX_QUEUED_PAUSE);
    pause.saturating_add(checkout.saturating_add(io).min(MAX_STAY_SLACK))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::{DEFAULT_CHECKOUT_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_TTL};

    #[test]
    fn ttl_bounds() {
        assert!(validate_ttl(Duration::ZERO, None).is_err());
        assert!(validate_ttl(Duration::from_micros(999), None).is_err());
        // 1 ms and 2 ms do not outlast the 2 ms drift allowance.
        assert!(validate_ttl(Duration::from_millis(2), None).is_err());
        assert!(validate_ttl(Duration::from_millis(3), None).is_ok());
        assert!(validate_ttl(DEFAULT_TTL, None).is_ok());
        assert!(validate_ttl(MAX_TTL, None).is_ok());
        assert!(validate_ttl(MAX_TTL + Duration::from_millis(1), None).is_err());
        assert!(validate_ttl(Duration::MAX, None).is_err());
        // A fixed drift must leave something of the lease.
        assert!(validate_ttl(Duration::from_millis(50), Some(Duration::from_millis(50))).is_err());
        assert!(validate_ttl(Duration::from_millis(51), Some(Duration::from_millis(50))).is_ok());
    }

    #[test]
    fn defaults_are_valid() {
        validate_ttl(DEFAULT_TTL, None).unwrap();
        validate_wait("checkout", DEFAULT_CHECKOUT_TIMEOUT).unwrap();
        validate_wait("io", DEFAULT_IO_TIMEOUT).unwrap();
        assert!(!DEFAULT_CHECKOUT_TIMEOUT.is_zero() && !DEFAULT_IO_TIMEOUT.is_zero());
        Backoff::default().validate().unwrap();
    }

    #[test]
    fn a_waiters_stay_is_bounded_whatever_its_settings() {
        let ms = Duration::from_millis;
        let io = DEFAULT_IO_TIMEOUT;
        // The defaults: 256 ms of pause, 2 s of slack.
        assert_eq!(
            waiter_stay(&Backoff::default(), DEFAULT_CHECKOUT_TIMEOUT, io),
            ms(2256)
        );
        assert_eq!(
            waiter_stay(&Backoff::fixed(ms(100)), ms(100), ms(200)),
            ms(400)
        );
        for b in [
            Backoff::fixed(Duration::from_secs(60)),
            Backoff::exponential(ms(8), Duration::MAX),
        ] {
            assert_eq!(waiter_stay(&b, MAX_TTL, MAX_TTL), ms(3000));
        }
    }

    #[test]
    fn waits_must_be_representable() {
        assert!(validate_wait("x", Duration::from_secs(3600)).is_ok());
        assert!(validate_wait("x", Duration::MAX).is_err());
        assert!(validate_wait("x", MAX_TTL).is_ok());
        assert!(validate_wait("x", MAX_TTL + Duration::from_millis(1)).is_err());
    }
}
