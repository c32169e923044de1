//! Mutual exclusion: lockers with separate pools, waiting, giving up,
//! release on panic, no reentrancy, and a non-atomic counter under load.
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{key, wait_behind, woken_by_the_release, Server};
use redmutex::{Backoff, Error, Locker};

#[test]
fn second_locker_cannot_take_a_held_key() {
    let server = Server::start();
    let (a, b) = (server.locker(), server.locker());
    let k = key("held");
    let g = a.try_lock(&k).unwrap().expect("free key");
    assert!(b.try_lock(&k).unwrap().is_none());
    drop(g);
    assert!(b.try_lock(&k).unwrap().is_some());
}

#[test]
fn not_reentrant_through_the_same_locker() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("reentrant");
    let _g = locker.lock(&k).unwrap();
    // The thread that holds it is told at once (tests/already_held.rs has
    // every call); another thread of the same locker waits for it.
    let again = locker.lock_timeout(&k, Duration::from_millis(50));
    assert!(matches!(again, Err(Error::AlreadyHeld { .. })), "{again:?}");
    assert!(common::elsewhere(|| locker.try_lock(&k).unwrap().is_none()));
    let again = common::elsewhere(|| locker.lock_timeout(&k, Duration::from_millis(50)));
    assert!(matches!(again, Err(Error::Timeout { .. })), "{again:?}");
}

#[test]
fn lock_timeout_gives_up_with_the_time_waited() {
    let server = Server::start();
    let (a, b) = (server.locker(), server.locker());
    let k = key("give-up");
    let _g = a.lock(&k).unwrap();
    let wait = Duration::from_millis(300);
    match b.lock_timeout(&k, wait) {
        Err(Error::Timeout {
            key: got,
            waited,
            attempts,
        }) => {
            assert_eq!(got, k);
            assert!(waited >= wait, "{waited:?}");
            assert!(attempts >= 2, "{attempts}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[test]
fn builder_acquire_timeout_applies_to_lock() {
    let server = Server::start();
    let holder = server.locker();
    let waiter = server
        .builder()
        .acquire_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let k = key("acquire-timeout");
    let _g = holder.lock(&k).unwrap();
    assert!(matches!(waiter.lock(&k), Err(Error::Timeout { .. })));
    assert!(matches!(
        waiter.lock_all(&[&k, "other"]),
        Err(Error::Timeout { .. })
    ));
}

#[test]
fn attempt_limit_ends_the_wait() {
    let server = Server::start();
    let holder = server.locker();
    let waiter = server
        .builder()
        .backoff(Backoff::fixed(Duration::from_millis(5)).max_attempts(3))
        .build()
        .unwrap();
    let k = key("limit");
    let _g = holder.lock(&k).unwrap();
    match waiter.lock(&k) {
        Err(Error::Timeout { attempts, .. }) => assert_eq!(attempts, 3),
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[test]
fn a_waiter_gets_the_lock_after_release() {
    let server = Server::start();
    let (a, b) = (server.locker(), server.locker());
    let k = key("handover");
    let first = a.lock(&k).unwrap();
    let first_token = first.fencing_token();
    let (started_tx, started_rx) = mpsc::channel();
    let waiter = {
        let k = k.clone();
        std::thread::spawn(move || {
            started_tx.send(()).unwrap();
            let g = b.lock(&k).unwrap();
            g.fencing_token()
        })
    };
    started_rx.recv().unwrap();
    // The waiter cannot have it while we hold it.
    assert_eq!(a.holder(&k).unwrap().unwrap().fencing_token(), first_token);
    drop(first);
    let second_token = waiter.join().unwrap();
    assert!(second_token > first_token);
}

#[test]
fn a_panic_in_the_critical_section_releases_the_lock() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("panic");
    let result = {
        let (locker, k) = (locker.clone(), k.clone());
        std::thread::spawn(move || {
            let _g = locker.lock(&k).unwrap();
            panic!("boom in the critical section");
        })
        .join()
    };
    assert!(result.is_err());
    // Released at once (the TTL is 30 s), and no poisoning.
    assert!(locker.holder(&k).unwrap().is_none());
    assert!(server.locker().try_lock(&k).unwrap().is_some());
}

#[test]
fn many_threads_on_several_lockers_lose_no_update() {
    const LOCKERS: usize = 3;
    const THREADS_PER_LOCKER: usize = 3;
    const ROUNDS: usize = 40;
    let server = Server::start();
    // Three threads share each locker; the lockers have separate pools.
    let lockers: Vec<Locker> = (0..LOCKERS)
        .flat_map(|_| std::iter::repeat_n(server.locker(), THREADS_PER_LOCKER))
        .collect();
    let total = common::count_under_lock(&lockers, &key("counter"), &server, ROUNDS);
    assert_eq!(total, (LOCKERS * THREADS_PER_LOCKER * ROUNDS) as u64);
}

#[test]
fn a_release_in_this_process_wakes_a_waiter_of_the_same_locker() {
    // Backoff and TTL are a minute and the waiter may wait 30 s (with a last
    // attempt at the end): only the release can get it the lock long before.
    let server = Server::start();
    let locker = server.slow_locker();
    let k = key("wake");
    let held = locker.lock(&k).unwrap();
    // Wait until the waiter's first attempt has failed, so it is waiting.
    let waiter = wait_behind(&server, &locker, &k, Duration::from_secs(30), 1);
    drop(held);
    woken_by_the_release(waiter);
}
