//! Waiting between acquisition attempts without sleeping: a waiter parks on
//! a condition variable until its deadline, until a release of one of its
//! keys is seen (a guard of this locker dropping it, or a release message
//! from Redis), or until the lock is handed over to it by a release,
//! whichever comes first.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::sync::{Condvar, Mutex};

/// Release counters for the keys that have waiters right now, and the
/// hand-overs to those waiters.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Bumped by [`Signal::wake_all`]: counted in every waiter's sum.
    epoch: u64,
    /// Redis key -> (releases seen, waiters registered).
    keys: HashMap<String, (u64, usize)>,
    /// Owner token of a waiter -> what it waits for and on.
    waiters: HashMap<String, Waiter>,
}

/// One waiting thread.
#[derive(Debug)]
struct Waiter {
    /// The fencing token of a lock handed over to it, once one is.
    handed: Option<u64>,
    /// What it parks on: one condition variable per waiter, so a hand-over
    /// wakes its waiter and no other thread.
    wake: Arc<Condvar>,
}

/// A waiter's interest in some keys; dropping it withdraws it.
pub(crate) struct Watch<'a> {
    signal: &'a Signal,
    keys: &'a [String],
    token: &'a str,
    wake: Arc<Condvar>,
}

impl Signal {
    /// Registers interest in `keys`, and in hand-overs to `token`, for the
    /// life of the returned watch.
    pub(crate) fn watch<'a>(&'a self, keys: &'a [String], token: &'a str) -> Watch<'a> {
        let mut state = self.state.lock();
        for k in keys {
            state.keys.entry(k.clone()).or_insert((0, 0)).1 += 1;
        }
        let wake = Arc::new(Condvar::new());
        let waiter = Waiter {
            handed: None,
            wake: Arc::clone(&wake),
        };
        state.waiters.insert(token.to_owned(), waiter);
        Watch {
            signal: self,
            keys,
            token,
            wake,
        }
    }

    /// A release of `key` was seen: wakes its waiters. Free when nobody
    /// waits for it.
    pub(crate) fn notify(&self, key: &str) {
        let mut state = self.state.lock();
        if let Some(entry) = state.keys.get_mut(key) {
            entry.0 += 1;
            // Any waiter may watch it; those that do not go back to sleep.
            for waiter in state.waiters.values() {
                waiter.wake.notify_one();
            }
        }
    }

    /// Wakes every waiter, to try again at once: a release may have gone
    /// unheard (a listener that has just subscribed again after its slot
    /// moved or its node failed).
    pub(crate) fn wake_all(&self) {
        let mut state = self.state.lock();
        state.epoch = state.epoch.wrapping_add(1);
        for waiter in state.waiters.values() {
            waiter.wake.notify_one();
        }
    }

    /// Whether some waiter watches a key for which `of` is true.
    pub(crate) fn watches(&self, of: impl Fn(&str) -> bool) -> bool {
        self.state.lock().keys.keys().any(|k| of(k))
    }

    /// A release handed a lock over to the waiter with `token`, with fencing
    /// token `fence`: wakes it, if it is one of ours. Nothing for others to
    /// retry: the lock is held again.
    pub(crate) fn hand_over(&self, token: &str, fence: u64) {
        let mut state = self.state.lock();
        if let Some(waiter) = state.waiters.get_mut(token) {
            waiter.handed = Some(fence);
            waiter.wake.notify_one();
        }
    }
}

impl Watch<'_> {
    /// The releases seen so far for the watched keys; pass it to
    /// [`Watch::wait_until`].
    pub(crate) fn current(&self) -> u64 {
        let state = self.signal.state.lock();
        self.sum(&state)
    }

    /// Blocks until a release of a watched key after `seen`, a hand-over to
    /// this waiter, or `deadline`.
    pub(crate) fn wait_until(&self, seen: u64, deadline: Instant) {
        let mut state = self.signal.state.lock();
        while self.sum(&state) == seen && Self::fence_in(&state, self.token).is_none() {
            if self.wake.wait_until(&mut state, deadline).timed_out() {
                return;
            }
        }
    }

    /// The fencing token of a lock handed over to this waiter since the last
    /// call, if one was.
    pub(crate) fn take_handed(&self) -> Option<u64> {
        let mut state = self.signal.state.lock();
        state
            .waiters
            .get_mut(self.token)
            .and_then(|w| w.handed.take())
    }

    fn fence_in(state: &State, token: &str) -> Option<u64> {
        state.waiters.get(token).and_then(|w| w.handed)
    }

    fn sum(&self, state: &State) -> u64 {
        self.keys
            .iter()
            .filter_map(|k| state.keys.get(k))
            .fold(state.epoch, |acc, e| acc.wrapping_add(e.0))
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut state = self.signal.state.lock();
        for k in self.keys {
            if let Some(entry) = state.keys.get_mut(k) {
                entry.1 = entry.1.saturating_sub(1);
                if entry.1 == 0 {
                    state.keys.remove(k);
                }
            }
        }
        state.waiters.remove(self.token);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn times_out_without_release() {
        let s = Signal::default();
        let keys = ["k".to_owned()];
        let w = s.watch(&keys, "t");
        let start = Instant::now();
        w.wait_until(w.current(), start + Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn wakes_on_a_release_of_its_key_only() {
        let s = Arc::new(Signal::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let t = {
            let s = Arc::clone(&s);
            std::thread::Builder::new()
                .spawn(move || {
                    let keys = ["mine".to_owned()];
                    let w = s.watch(&keys, "t");
                    let seen = w.current();
                    tx.send(()).unwrap();
                    w.wait_until(seen, Instant::now() + Duration::from_secs(3600));
                })
                .unwrap()
        };
        rx.recv().unwrap();
        s.notify("other"); // not its key: it keeps waiting
        s.notify("mine");
        t.join().unwrap();
    }

    #[test]
    fn a_release_before_waiting_is_not_missed() {
        let s = Signal::default();
        let keys = ["k".to_owned()];
        let w = s.watch(&keys, "t");
        let seen = w.current();
        s.notify("k");
        // Returns at once even with a far deadline.
        w.wait_until(seen, Instant::now() + Duration::from_secs(3600));
    }

    #[test]
    fn a_hand_over_wakes_its_waiter_once_and_no_other() {
        let s = Signal::default();
        let keys = ["k".to_owned()];
        let mine = s.watch(&keys, "mine");
        let other = s.watch(&keys, "other");
        s.hand_over("mine", 7);
        s.hand_over("stranger", 8); // not a waiter here: ignored
        let seen = mine.current();
        mine.wait_until(seen, Instant::now() + Duration::from_secs(3600));
        assert_eq!(mine.take_handed(), Some(7));
        assert_eq!(mine.take_handed(), None);
        assert_eq!(other.take_handed(), None);
        let start = Instant::now();
        other.wait_until(other.current(), start + Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn wake_all_wakes_every_waiter() {
        let s = Signal::default();
        let (a, b) = (["a".to_owned()], ["b".to_owned()]);
        let (wa, wb) = (s.watch(&a, "ta"), s.watch(&b, "tb"));
        let (seen_a, seen_b) = (wa.current(), wb.current());
        assert!(s.watches(|k| k == "b") && !s.watches(|k| k == "c"));
        s.wake_all();
        let far = Instant::now() + Duration::from_secs(3600);
        wa.wait_until(seen_a, far);
        wb.wait_until(seen_b, far);
    }

    #[test]
    fn unwatched_keys_leave_nothing_behind() {
        let s = Signal::default();
        s.notify("nobody-waits");
        {
            let keys = ["a".to_owned(), "b".to_owned()];
            let _w1 = s.watch(&keys, "t1");
            let _w2 = s.watch(&keys[..1], "t2");
            assert_eq!(s.state.lock().keys.len(), 2);
            assert_eq!(s.state.lock().waiters.len(), 2);
        }
        assert!(s.state.lock().keys.is_empty());
        assert!(s.state.lock().waiters.is_empty());
    }
}

/// `RUSTFLAGS="--cfg loom" cargo test --release --lib loom`: every
/// interleaving of a waiter and a release, within loom's bounds.
#[cfg(all(test, loom))]
#[allow(clippy::unwrap_used)]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use std::time::Duration;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    /// A waiter registers for `k` as `t`; `release` runs on another
    /// thread while it goes to sleep; `then` checks what it woke to. A
    /// wake-up lost on the way would leave it asleep: loom reports that as
    /// a deadlock.
    fn woken_by(release: fn(&Signal), then: fn(&Watch<'_>)) {
        loom::model(move || {
            let s = Arc::new(Signal::default());
            let keys = ["k".to_owned()];
            let w = s.watch(&keys, "t");
            let seen = w.current();
            let other = {
                let s = Arc::clone(&s);
                loom::thread::spawn(move || release(&s))
            };
            w.wait_until(seen, far());
            then(&w);
            other.join().unwrap();
        });
    }

    /// A release that comes after the waiter registered is never lost,
    /// whether it comes before the waiter sleeps or after.
    #[test]
    fn loom_a_release_after_registering_always_wakes_the_waiter() {
        woken_by(|s| s.notify("k"), |_| {});
    }

    /// A hand-over is never lost, and the waiter finds its fencing token.
    #[test]
    fn loom_a_hand_over_always_reaches_its_waiter() {
        woken_by(
            |s| s.hand_over("t", 7),
            |w| assert_eq!(w.take_handed(), Some(7)),
        );
    }
}
