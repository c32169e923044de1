//! The locks, condition variables and channels of the in-process state
//! that `loom` checks (the lease, the waiter registry, the hand-off of a
//! job to a parked watchdog worker): `parking_lot`'s and `std`'s, or, built
//! with `--cfg loom`, `loom`'s behind the same API. Under loom a timed wait
//! waits untimed (loom has no clock): a wake-up that could be lost then
//! shows as a deadlock.

#[cfg(not(loom))]
pub(crate) use parking_lot::{Condvar, Mutex};
/// The channels that hand a watchdog's job to a parked worker.
#[cfg(not(loom))]
pub(crate) use std::sync::mpsc;

#[cfg(loom)]
pub(crate) use loom::sync::mpsc;

#[cfg(loom)]
pub(crate) use self::loom_shim::{Condvar, Mutex};

#[cfg(loom)]
mod loom_shim {
    use std::fmt;
    use std::ops::{Deref, DerefMut};
    use std::time::Instant;

    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    /// A guard that a condition variable can take and give back.
    pub(crate) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(|e| e.into_inner())))
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Mutex::new(T::default())
        }
    }

    impl<T> fmt::Debug for Mutex<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Mutex")
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_deref().unwrap_or_else(|| unreachable!())
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0.as_deref_mut().unwrap_or_else(|| unreachable!())
        }
    }

    #[derive(Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    pub(crate) struct WaitTimeoutResult;

    impl WaitTimeoutResult {
        pub(crate) fn timed_out(&self) -> bool {
            false
        }
    }

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }

        pub(crate) fn notify_one(&self) -> bool {
            self.0.notify_one();
            true
        }

        pub(crate) fn notify_all(&self) -> usize {
            self.0.notify_all();
            0
        }

        pub(crate) fn wait_until<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _deadline: Instant,
        ) -> WaitTimeoutResult {
            if let Some(g) = guard.0.take() {
                guard.0 = Some(self.0.wait(g).unwrap_or_else(|e| e.into_inner()));
            }
            WaitTimeoutResult
        }
    }

    impl fmt::Debug for Condvar {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Condvar")
        }
    }
}
