//! Waiting between acquisition attempts without sleeping: a waiter parks on
//! a condition variable until its deadline, or until a release of one of its
//! keys is seen (a guard of this locker dropping it, or a release message
//! from Redis), whichever comes first.

use std::collections::HashMap;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// Release counters for the keys that have waiters right now.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    /// Redis key -> (releases seen, waiters registered).
    keys: Mutex<HashMap<String, (u64, usize)>>,
    changed: Condvar,
}

/// A waiter's interest in some keys; dropping it withdraws it.
pub(crate) struct Watch<'a> {
    signal: &'a Signal,
    keys: &'a [String],
}

impl Signal {
    /// Registers interest in `keys` for the life of the returned watch.
    pub(crate) fn watch<'a>(&'a self, keys: &'a [String]) -> Watch<'a> {
        let mut map = self.keys.lock();
        for k in keys {
            map.entry(k.clone()).or_insert((0, 0)).1 += 1;
        }
        Watch { signal: self, keys }
    }

    /// A release of `key` was seen: wakes its waiters. Free when nobody
    /// waits for it.
    pub(crate) fn notify(&self, key: &str) {
        let mut map = self.keys.lock();
        if let Some(entry) = map.get_mut(key) {
            entry.0 += 1;
            drop(map);
            self.changed.notify_all();
        }
    }
}

impl Watch<'_> {
    /// The releases seen so far for the watched keys; pass it to
    /// [`Watch::wait_until`].
    pub(crate) fn current(&self) -> u64 {
        let map = self.signal.keys.lock();
        self.sum(&map)
    }

    /// Blocks until a release of a watched key after `seen`, or `deadline`.
    pub(crate) fn wait_until(&self, seen: u64, deadline: Instant) {
        let mut map = self.signal.keys.lock();
        while self.sum(&map) == seen {
            if self
                .signal
                .changed
                .wait_until(&mut map, deadline)
                .timed_out()
            {
                return;
            }
        }
    }

    fn sum(&self, map: &HashMap<String, (u64, usize)>) -> u64 {
        self.keys
            .iter()
            .filter_map(|k| map.get(k))
            .fold(0u64, |acc, e| acc.wrapping_add(e.0))
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut map = self.signal.keys.lock();
        for k in self.keys {
            if let Some(entry) = map.get_mut(k) {
                entry.1 = entry.1.saturating_sub(1);
                if entry.1 == 0 {
                    map.remove(k);
                }
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
        let keys = ["k".to_owned()];
        let w = s.watch(&keys);
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
                    let w = s.watch(&keys);
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
        let w = s.watch(&keys);
        let seen = w.current();
        s.notify("k");
        // Returns at once even with a far deadline.
        w.wait_until(seen, Instant::now() + Duration::from_secs(3600));
    }

    #[test]
    fn unwatched_keys_leave_nothing_behind() {
        let s = Signal::default();
        s.notify("nobody-waits");
        {
            let keys = ["a".to_owned(), "b".to_owned()];
            let _w1 = s.watch(&keys);
            let _w2 = s.watch(&keys[..1]);
            assert_eq!(s.keys.lock().len(), 2);
        }
        assert!(s.keys.lock().is_empty());
    }
}
