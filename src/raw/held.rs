//! The holds of a locker's guards in this process, by the thread that took
//! each: a call that could only wait behind a hold of its own thread (a
//! second `lock` of a key, a write under its own read, one permit more
//! than the semaphore has) is refused at once with `Error::AlreadyHeld`,
//! with no round trip, instead of waiting for itself until it times out.
//!
//! A hold is filed under one name per thing it excludes: each key of a
//! lock, a semaphore's queue (one name per semaphore, counted), a
//! read-write lock's writer key (read or write), an election's key. It is
//! filed when its guard is built and taken out when its guard's hold ends,
//! wherever that happens: a guard moved to another thread still counts for
//! the thread that took it until then (the library cannot see a move). A
//! guard whose lease is lost no longer counts: whoever holds the key now,
//! it is not this thread, which waits for it as for anyone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, ThreadId};

use parking_lot::Mutex;

use crate::lease::Lease;
use crate::protocol::keys::Hold;
use crate::stats::recorder::{Kind, Kinded};
use crate::Error;

use super::{Acquisition, RawLock};

/// The holds of a locker's guards, by the name of what they exclude.
#[derive(Default)]
pub(crate) struct Registry {
    held: Mutex<HashMap<String, Vec<Holder>>>,
    /// The number of the next hold filed.
    next: AtomicU64,
}

/// One hold filed: its thread, its number, whether it is a read hold, and
/// its lease (a lost one no longer counts).
struct Holder {
    thread: ThreadId,
    id: u64,
    read: bool,
    lease: Arc<Lease>,
}

/// The names a hold of `a` is filed under (see the module's docs), each
/// with the caller's key an error names.
fn names(a: &Acquisition) -> impl Iterator<Item = (&str, &str)> {
    let name = a.caller_keys.first().map_or("", String::as_str);
    let (one, each): (Option<&String>, &[String]) = match (&a.keys.hold, a.kind()) {
        (_, Kind::Permit) => (Some(&a.keys.queue), &[]),
        (Hold::Read { writer, .. }, _) => (writer.first(), &[]),
        (Hold::Lock, _) => (None, &a.keys.locks),
        (Hold::Write { .. } | Hold::Leader { .. } | Hold::Permit, _) => (a.keys.locks.first(), &[]),
    };
    let each = each
        .iter()
        .zip(a.caller_keys.iter())
        .map(|(k, c)| (k.as_str(), c.as_str()));
    one.map(|k| (k.as_str(), name)).into_iter().chain(each)
}

impl Registry {
    /// `Err(AlreadyHeld)` when `a` could only wait behind a hold the
    /// calling thread took through this locker (or a clone): a key of a
    /// lock it holds, an election it leads, a read-write lock it holds (for
    /// a write) or holds the write of (for a read), or a semaphore whose
    /// every permit it holds.
    pub(crate) fn refuse_self_wait(&self, a: &Acquisition) -> Result<(), Error> {
        let me = thread::current().id();
        let held = self.held.lock();
        if held.is_empty() {
            return Ok(());
        }
        let reading = matches!(a.keys.hold, Hold::Read { .. });
        let permits = matches!(a.keys.hold, Hold::Permit).then(|| a.keys.locks.len());
        for (name, key) in names(a) {
            let Some(holders) = held.get(name) else {
                continue;
            };
            let mine = holders
                .iter()
                .filter(|h| h.thread == me && !(reading && h.read) && !h.lease.is_lost());
            let waits = match permits {
                Some(n) => mine.count() >= n,
                None => mine.count() > 0,
            };
            if waits {
                return Err(Error::AlreadyHeld {
                    key: key.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Files the hold of `a`, granted with `lease`, for the calling thread:
    /// its number, for [`Registry::unfile`] at the hold's end.
    pub(crate) fn file(&self, a: &Acquisition, lease: &Arc<Lease>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let thread = thread::current().id();
        let holder = || Holder {
            thread,
            id,
            read: matches!(a.keys.hold, Hold::Read { .. }),
            lease: Arc::clone(lease),
        };
        let mut held = self.held.lock();
        for (name, _) in names(a) {
            match held.get_mut(name) {
                Some(holders) => holders.push(holder()),
                None => {
                    held.insert(name.to_owned(), vec![holder()]);
                }
            }
        }
        id
    }

    /// Takes the hold `id` of `a` out of the registry: its guard's hold
    /// ended.
    pub(crate) fn unfile(&self, a: &Acquisition, id: u64) {
        let mut held = self.held.lock();
        for (name, _) in names(a) {
            if let Some(holders) = held.get_mut(name) {
                holders.retain(|h| h.id != id);
                if holders.is_empty() {
                    held.remove(name);
                }
            }
        }
    }
}

impl RawLock {
    /// See [`Registry::refuse_self_wait`].
    pub(crate) fn refuse_self_wait(&self, a: &Acquisition) -> Result<(), Error> {
        self.registry.refuse_self_wait(a)
    }

    /// See [`Registry::file`].
    pub(crate) fn file(&self, a: &Acquisition, lease: &Arc<Lease>) -> u64 {
        self.registry.file(a, lease)
    }

    /// See [`Registry::unfile`].
    pub(crate) fn unfile(&self, a: &Acquisition, id: u64) {
        self.registry.unfile(a, id);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::protocol::keys::KeySpace;

    fn lock(names: &[&str]) -> Acquisition {
        let keys = KeySpace::new(Some("p".to_owned())).lock_keys(names, false);
        let caller: Arc<[String]> = names.iter().map(|n| (*n).to_owned()).collect();
        Acquisition::new(caller, keys).unwrap()
    }

    fn lease() -> Arc<Lease> {
        Arc::new(Lease::new(Instant::now(), Duration::from_secs(30), None))
    }

    #[test]
    fn a_thread_is_refused_only_what_it_holds_until_its_hold_ends() {
        let r = Registry::default();
        let (a, b) = (lock(&["a"]), lock(&["b", "a"]));
        assert!(r.refuse_self_wait(&a).is_ok());
        let id = r.file(&a, &lease());
        match r.refuse_self_wait(&b) {
            Err(Error::AlreadyHeld { key }) => assert_eq!(key, "a"),
            other => panic!("{other:?}"),
        }
        // Another thread is not refused.
        std::thread::scope(|s| {
            s.spawn(|| assert!(r.refuse_self_wait(&a).is_ok()));
        });
        r.unfile(&a, id);
        assert!(r.refuse_self_wait(&b).is_ok());
        assert!(r.held.lock().is_empty(), "nothing left behind");
    }

    /// What the registry adds to one lock + unlock cycle: the check, the
    /// filing and the taking out, measured alone with one hold of the
    /// thread's own on another key and 1,000 of other threads (a cycle's
    /// round trips make the difference too small to see against the noise
    /// of a loaded machine). A measurement, not a check:
    /// `cargo test --release --lib registry_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement; run it alone, in release"]
    fn registry_cost() {
        const N: u32 = 1_000_000;
        let r = Registry::default();
        let other = lock(&["other"]);
        let _mine = r.file(&other, &lease());
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..1000 {
                    r.file(&lock(&[&format!("k{i}")]), &lease());
                }
            });
        });
        let (a, l) = (lock(&["a"]), lease());
        for _ in 0..3 {
            let start = Instant::now();
            for _ in 0..N {
                r.refuse_self_wait(std::hint::black_box(&a)).unwrap();
                let id = r.file(&a, &l);
                r.unfile(&a, id);
            }
            println!(
                "registry: {:?} per lock + unlock cycle",
                start.elapsed() / N
            );
        }
    }
}
