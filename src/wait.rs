//! Waiting between acquisition attempts without sleeping: a waiter parks on
//! a condition variable until its deadline or until a lock of the same
//! locker is released in this process, whichever comes first.

use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// A release counter that waiters can block on.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    releases: Mutex<u64>,
    changed: Condvar,
}

impl Signal {
    /// The number of releases seen so far; pass it to [`Signal::wait_until`].
    pub(crate) fn current(&self) -> u64 {
        *self.releases.lock()
    }

    /// Wakes every waiter: a lock was released.
    pub(crate) fn notify(&self) {
        *self.releases.lock() += 1;
        self.changed.notify_all();
    }

    /// Blocks until a release after `seen`, or until `deadline`.
    pub(crate) fn wait_until(&self, seen: u64, deadline: Instant) {
        let mut releases = self.releases.lock();
        while *releases == seen {
            if self.changed.wait_until(&mut releases, deadline).timed_out() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn times_out_without_release() {
        let s = Signal::default();
        let start = Instant::now();
        s.wait_until(s.current(), start + Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn wakes_on_release() {
        let s = Arc::new(Signal::default());
        let seen = s.current();
        let t = {
            let s = Arc::clone(&s);
            std::thread::Builder::new()
                .spawn(move || s.wait_until(seen, Instant::now() + Duration::from_secs(3600)))
                .unwrap()
        };
        s.notify();
        t.join().unwrap();
        assert_eq!(s.current(), seen + 1);
    }

    #[test]
    fn a_release_before_waiting_is_not_missed() {
        let s = Signal::default();
        let seen = s.current();
        s.notify();
        // Returns at once even with a far deadline.
        s.wait_until(seen, Instant::now() + Duration::from_secs(3600));
    }
}
