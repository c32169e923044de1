//! Retry delays between acquisition attempts, as pure functions.

use std::time::Duration;

use crate::defaults::DEFAULT_BACKOFF;
use crate::Error;

/// How long a waiting [`lock`](crate::Locker::lock) call pauses between two
/// attempts, and how many attempts it makes at most.
///
/// A pause ends early when the holder's lease would have run out, so a waiter
/// behind a crashed holder retries at the TTL, not a whole delay later.
///
/// Defaults to `Backoff::exponential(8 ms, 256 ms)` with no attempt limit.
///
/// Pauses of any length are accepted (`Duration::MAX` as the upper bound of
/// an exponential backoff means no bound); one above
/// [`MAX_TTL`](crate::MAX_TTL) is taken as `MAX_TTL`. A waiter queued for
/// the lock still calls the server at least every second, to keep its
/// place (such a call takes the lock if it is free; it is not counted by
/// [`max_attempts`](Backoff::max_attempts)).
///
/// ```no_run
/// # let pool = redmutex::pool("redis://127.0.0.1/")?;
/// use std::time::Duration;
/// use redmutex::{Backoff, Locker};
/// // Like bsm/redislock's LimitRetry(LinearBackoff(100ms), 3): three tries,
/// // 100 ms apart, then `Error::Timeout`.
/// let locker = Locker::builder(pool)
///     .backoff(Backoff::fixed(Duration::from_millis(100)).max_attempts(3))
///     .build()?;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    kind: Kind,
    max_attempts: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fixed(Duration),
    Exponential { min: Duration, max: Duration },
}

impl Backoff {
    /// The same pause between every two attempts.
    ///
    /// `delay` must not be zero ([`Builder::build`](crate::Builder::build)
    /// refuses it: a zero pause hammers the server).
    ///
    /// ```
    /// use std::time::Duration;
    /// let every_50ms = redmutex::Backoff::fixed(Duration::from_millis(50));
    /// # let _ = every_50ms;
    /// ```
    pub fn fixed(delay: Duration) -> Self {
        Backoff {
            kind: Kind::Fixed(delay),
            max_attempts: None,
        }
    }

    /// Pauses that double from `min` up to `max`, each drawn at random from
    /// the upper half of its step (never below `min`) so that waiters started
    /// together spread out.
    ///
    /// `min` must be above zero and not above `max`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let b = redmutex::Backoff::exponential(Duration::from_millis(16), Duration::from_secs(1));
    /// # let _ = b;
    /// ```
    pub fn exponential(min: Duration, max: Duration) -> Self {
        Backoff {
            kind: Kind::Exponential { min, max },
            max_attempts: None,
        }
    }

    /// Gives up after `attempts` acquisition attempts in all (the first one
    /// included) with [`Error::Timeout`]. Must be at least 1; 1 behaves like
    /// [`try_lock`](crate::Locker::try_lock) with an error instead of `None`.
    ///
    /// Defaults to no limit: only the acquire timeout ends the wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// let three_tries = redmutex::Backoff::fixed(Duration::from_millis(100)).max_attempts(3);
    /// # let _ = three_tries;
    /// ```
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The attempt limit, if any.
    pub(crate) fn attempt_limit(&self) -> Option<u32> {
        self.max_attempts
    }

    /// Checks the settings; called by the builder.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        match self.kind {
            Kind::Fixed(d) if d.is_zero() => {
                return Err(Error::InvalidInput(
                    "backoff delay must be above zero".into(),
                ))
            }
            Kind::Exponential { min, .. } if min.is_zero() => {
                return Err(Error::InvalidInput(
                    "backoff minimum must be above zero".into(),
                ))
            }
            Kind::Exponential { min, max } if min > max => {
                return Err(Error::InvalidInput(format!(
                    "backoff minimum {min:?} is above its maximum {max:?}"
                )))
            }
            _ => {}
        }
        if self.max_attempts == Some(0) {
            return Err(Error::InvalidInput(
                "backoff must allow at least one attempt".into(),
            ));
        }
        Ok(())
    }

    /// The longest pause this backoff ever makes.
    pub(crate) fn longest(&self) -> Duration {
        match self.kind {
            Kind::Fixed(d) => d,
            Kind::Exponential { max, .. } => max,
        }
    }

    /// The pause after failed attempt number `attempt` (0 for the first),
    /// with `random` as the source of jitter.
    pub(crate) fn delay(&self, attempt: u32, random: u64) -> Duration {
        match self.kind {
            Kind::Fixed(d) => d,
            Kind::Exponential { min, max } => {
                let step = min
                    .checked_mul(1u32 << attempt.min(31))
                    .map_or(max, |d| d.min(max));
                let half = step / 2;
                let spread = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
                let jitter = match spread {
                    0 => Duration::ZERO,
                    s => Duration::from_nanos(random % s.saturating_add(1)),
                };
                half.saturating_add(jitter).max(min)
            }
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::exponential(DEFAULT_BACKOFF.0, DEFAULT_BACKOFF.1)
    }
}

/// A random number for jitter; jitter needs no cryptographic quality, so a
/// failing random source just means no jitter.
pub(crate) fn jitter_seed() -> u64 {
    getrandom::u64().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn fixed_is_constant() {
        let b = Backoff::fixed(50 * MS);
        for attempt in [0, 1, 7, 1000] {
            assert_eq!(b.delay(attempt, u64::MAX), 50 * MS);
        }
    }

    #[test]
    fn exponential_doubles_within_bounds() {
        let b = Backoff::exponential(8 * MS, 256 * MS);
        // With no jitter the pause is the lower half of each step, floored at min.
        assert_eq!(b.delay(0, 0), 8 * MS);
        assert_eq!(b.delay(1, 0), 8 * MS);
        assert_eq!(b.delay(2, 0), 16 * MS);
        assert_eq!(b.delay(3, 0), 32 * MS);
        for attempt in 0..200 {
            for random in [0, 1, 12345, u64::MAX] {
                let d = b.delay(attempt, random);
                assert!(d >= 8 * MS && d <= 256 * MS, "{attempt} {random} {d:?}");
            }
        }
        assert_eq!(b.delay(40, 0), 128 * MS);
    }

    #[test]
    fn huge_bounds_do_not_overflow() {
        let b = Backoff::exponential(Duration::from_secs(u64::MAX / 4), Duration::MAX);
        let _ = b.delay(31, u64::MAX);
        let _ = b.delay(u32::MAX, 7);
    }

    #[test]
    fn jitter_spreads_waiters() {
        let b = Backoff::exponential(8 * MS, 256 * MS);
        let a = b.delay(5, 1);
        let c = b.delay(5, 99_999_999);
        assert_ne!(a, c);
    }

    #[test]
    fn validation() {
        assert!(Backoff::default().validate().is_ok());
        assert!(Backoff::fixed(Duration::ZERO).validate().is_err());
        assert!(Backoff::exponential(Duration::ZERO, MS).validate().is_err());
        assert!(Backoff::exponential(2 * MS, MS).validate().is_err());
        assert!(Backoff::fixed(MS).max_attempts(0).validate().is_err());
        assert!(Backoff::fixed(MS).max_attempts(1).validate().is_ok());
    }
}
