//! A break found by the holder's own call (issue 42, item 10): whichever
//! call finds that an operator broke the hold (`run_if_held`, `extend`,
//! `unlock`, `expire_at`; a renewal is tested in `tests/operate.rs`), the guard says
//! "broken by an operator: <reason>" (`Guard::lost_reason`), the lease
//! change is `LeaseChangeReason::Broken`, and the locker's `Stats` count it
//! in `losses_broken`, for every kind of hold. The TTL is a minute, so no
//! renewal (every 20 s) comes between the break and the call.
// Test helpers fail loudly: that is the point.
#![allow(
    clippy::disallowed_methods,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{key, wait_until, Server};
use redmutex::{Guard, LeaseChangeReason, Locker};

/// The changes to `Lost` a locker's callback was told, with their reasons.
type Told = Arc<Mutex<Vec<LeaseChangeReason>>>;

/// A locker of its own (its own stats) whose callback records every loss.
fn watched(server: &Server, prefix: &str) -> (Locker, Told) {
    common::recording_losses(server.builder().prefix(prefix).ttl(Duration::from_secs(60)))
}

/// The call found the break: the guard, the callback and the stats say so.
fn says_broken(what: &str, guard: &Guard, locker: &Locker, told: &Told) {
    assert_eq!(
        guard.lost_reason().as_deref(),
        Some("broken by an operator: review"),
        "{what}"
    );
    wait_until("the loss told", Duration::from_secs(10), || {
        !told.lock().unwrap().is_empty()
    });
    assert_eq!(*told.lock().unwrap(), [LeaseChangeReason::Broken], "{what}");
    counted_broken(what, locker);
}

/// The locker's stats count one loss, broken by an operator.
fn counted_broken(what: &str, locker: &Locker) {
    let stats = locker.stats();
    assert_eq!(
        (stats.losses(), stats.losses_broken()),
        (1, 1),
        "{what}: {stats}"
    );
}

#[test]
fn a_break_found_by_run_if_held_is_told_as_a_break() {
    let server = Server::start();
    let prefix = key("found-run");
    let mut write = redis::pipe();
    write.set("app:x", 1);

    let (locker, told) = watched(&server, &prefix);
    let guard = locker.lock("job").unwrap();
    locker.break_lock("job", "review").unwrap().unwrap();
    assert!(guard.run_if_held(&write).is_err());
    says_broken("a lock", &guard, &locker, &told);

    let (locker, told) = watched(&server, &prefix);
    let permit = locker.semaphore("slots", 2).unwrap().acquire().unwrap();
    let name = format!("__redmutex__:permit:{}:slots", permit.permit().unwrap());
    locker.break_lock(&name, "review").unwrap().unwrap();
    assert!(permit.run_if_held(&write).is_err());
    says_broken("a permit", &permit, &locker, &told);
}

#[test]
fn a_break_found_by_extend_is_told_as_a_break() {
    let server = Server::start();
    let prefix = key("found-extend");

    let (locker, told) = watched(&server, &prefix);
    let guard = locker.lock_all(["a", "b"]).unwrap();
    locker.break_lock("b", "review").unwrap().unwrap();
    assert!(guard.extend(Duration::from_secs(60)).is_err());
    says_broken("a lock on several keys", &guard, &locker, &told);

    let (locker, told) = watched(&server, &prefix);
    let read = locker.rwlock("cfg").unwrap().read().unwrap();
    let name = locker.locks().unwrap()[0].key().to_owned();
    locker.break_lock(&name, "review").unwrap().unwrap();
    assert!(read.extend(Duration::from_secs(60)).is_err());
    says_broken("a read hold", &read, &locker, &told);
}

#[test]
fn a_break_found_by_unlock_is_counted_as_a_break() {
    // `unlock` takes the guard, so only the stats can say it (and the
    // callback is told nothing after a release).
    let server = Server::start();
    let prefix = key("found-unlock");

    let (locker, _) = watched(&server, &prefix);
    let guard = locker.lock("job").unwrap();
    locker.break_lock("job", "review").unwrap().unwrap();
    assert!(guard.unlock().is_err());
    counted_broken("a lock", &locker);

    let (locker, _) = watched(&server, &prefix);
    let write = locker.rwlock("cfg").unwrap().write().unwrap();
    locker
        .break_lock("__redmutex__:rw-write:cfg", "review")
        .unwrap()
        .unwrap();
    assert!(write.unlock().is_err());
    counted_broken("a write hold", &locker);

    // `expire_at` ends a hold as `unlock` does.
    let (locker, _) = watched(&server, &prefix);
    let permit = locker.semaphore("slots", 1).unwrap().acquire().unwrap();
    locker
        .break_lock("__redmutex__:permit:0:slots", "review")
        .unwrap()
        .unwrap();
    let later = std::time::Instant::now() + Duration::from_secs(60);
    assert!(permit.expire_at(later).is_err());
    counted_broken("a permit's expire_at", &locker);
}
