//! Duration arithmetic shared by the lock logic: one saturating conversion to
//! milliseconds, and the clock-drift allowance.

use std::time::{Duration, Instant};

use crate::defaults::default_drift;

/// Whole milliseconds in `d`, rounded up, saturating at `u64::MAX`.
///
/// Rounding up keeps a sub-millisecond remainder from turning into a shorter
/// lease in Redis than the caller asked for.
pub(crate) fn millis_ceil(d: Duration) -> u64 {
    let whole = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        whole
    } else {
        whole.saturating_add(1)
    }
}

/// The clock-drift allowance subtracted from a lease: `fixed` when the
/// builder set one, else the default (see [`default_drift`]).
pub(crate) fn drift(ttl: Duration, fixed: Option<Duration>) -> Duration {
    fixed.unwrap_or_else(|| default_drift(ttl))
}

/// `start + d`, or `None` when the sum cannot be represented.
pub(crate) fn deadline(start: Instant, d: Duration) -> Option<Instant> {
    start.checked_add(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_up_and_saturate() {
        assert_eq!(millis_ceil(Duration::ZERO), 0);
        assert_eq!(millis_ceil(Duration::from_micros(1)), 1);
        assert_eq!(millis_ceil(Duration::from_millis(300)), 300);
        assert_eq!(millis_ceil(Duration::from_micros(300_001)), 301);
        assert_eq!(millis_ceil(Duration::MAX), u64::MAX);
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(
            drift(Duration::from_secs(30), None),
            Duration::from_millis(302)
        );
        assert_eq!(
            drift(Duration::from_millis(300), None),
            Duration::from_millis(5)
        );
        assert_eq!(
            drift(Duration::from_secs(30), Some(Duration::ZERO)),
            Duration::ZERO
        );
    }
}
