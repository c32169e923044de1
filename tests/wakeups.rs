//! Waiters are woken by a release, across lockers with separate pools (as
//! in separate processes), not by their backoff; a lost notification costs
//! one backoff delay, never a hang.
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::time::Duration;

use common::{key, wait_behind, wait_until, woken_by_the_release, Server};
use redmutex::Backoff;

/// Drops `held` while `waiting` waits behind it, and returns the waiter's
/// guard after checking that the release handed the lock over by itself:
/// no attempt of the waiter's own, only the release and the renewal that
/// takes the claim up to the full TTL, which the guard's watchdog sends as
/// `lock` returns (waited for here: the lockers' TTL is a minute).
#[allow(clippy::unwrap_used)] // a helper of the tests: failing loudly is the point
fn hand_over(
    server: &Server,
    held: redmutex::Guard,
    waiting: std::thread::JoinHandle<(Result<redmutex::Guard, redmutex::Error>, Duration)>,
) -> redmutex::Guard {
    let before = server.evalsha_calls();
    drop(held);
    let (got, _) = waiting.join().unwrap();
    let guard = got.unwrap();
    wait_until(
        "the watchdog takes the claim up",
        Duration::from_secs(10),
        || guard.valid_until() > std::time::Instant::now() + Duration::from_secs(30),
    );
    assert_eq!(
        server.evalsha_calls() - before,
        2,
        "the release handed it over, the waiter took it up: no attempt of its own"
    );
    guard
}

#[test]
fn a_release_elsewhere_wakes_the_waiter_not_its_backoff() {
    // A minute of backoff and TTL: only the release can get the waiter the
    // lock long before the end of its 30 s wait.
    let server = Server::start();
    let (holder, waiter) = (server.slow_locker(), server.slow_locker());
    let k = key("woken");
    let held = holder.lock(&k).unwrap();
    let t = wait_behind(&server, &waiter, &k, Duration::from_secs(30), 2);
    assert_eq!(server.release_subscribers(), 1);
    drop(held);
    woken_by_the_release(t);
}

#[test]
fn a_lost_notification_costs_one_backoff_not_a_hang() {
    let server = Server::start();
    let holder = server.locker_with_ttl(Duration::from_secs(60));
    let waiter = server
        .builder()
        .ttl(Duration::from_secs(60))
        .backoff(Backoff::fixed(Duration::from_millis(300)))
        .build()
        .unwrap();
    let k = key("lost-note");
    let held = holder.lock(&k).unwrap();
    let t = wait_behind(&server, &waiter, &k, Duration::from_secs(20), 2);
    assert_eq!(server.release_subscribers(), 1);
    // Cut the listener's connection: the release message is lost.
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut server.conn())
        .unwrap();
    drop(held);
    let (got, took) = t.join().unwrap();
    assert!(got.is_ok(), "the waiter must still get the lock: {got:?}");
    assert!(took < Duration::from_secs(15), "{took:?}");
}

#[test]
fn one_listener_serves_every_waiter_of_a_locker() {
    let server = Server::start();
    let holder = server.locker();
    let waiter = server
        .builder()
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap();
    let keys: Vec<String> = (0..4).map(|i| key(&format!("many{i}"))).collect();
    let held: Vec<_> = keys.iter().map(|k| holder.lock(k).unwrap()).collect();
    let waiting: Vec<_> = keys
        .iter()
        .map(|k| wait_behind(&server, &waiter, k, Duration::from_secs(30), 1))
        .collect();
    wait_until("the waiters listen", Duration::from_secs(20), || {
        server.release_subscribers() >= 1
    });
    assert_eq!(
        server.release_subscribers(),
        1,
        "one connection for all waiters"
    );
    drop(held);
    for t in waiting {
        let (got, took) = t.join().unwrap();
        assert!(
            got.is_ok() && took < Duration::from_secs(15),
            "{got:?} {took:?}"
        );
    }
}

/// A release hands the lock to the first queued waiter inside the release
/// script: the waiter holds it without sending another attempt.
#[test]
fn a_release_hands_the_lock_to_the_queued_waiter_in_one_round_trip() {
    let server = Server::start();
    let (holder, waiter) = (server.slow_locker(), server.slow_locker());
    let k = key("handed");
    // Loads the release script, so that the release below is one call.
    holder.lock(&key("warm-up")).unwrap().unlock().unwrap();
    let held = holder.lock(&k).unwrap();
    let holder_fence = held.fencing_token();
    let t = wait_behind(&server, &waiter, &k, Duration::from_secs(30), 2);
    let guard = hand_over(&server, held, t);
    assert!(guard.fencing_token() > holder_fence);
    let info = holder.holder(&k).unwrap().unwrap();
    assert_eq!(info.fencing_token(), guard.fencing_token());
    // The waiter's lease is real: renewable, and released by its unlock.
    guard.extend(Duration::from_secs(60)).unwrap();
    guard.unlock().unwrap();
    assert!(holder.holder(&k).unwrap().is_none());
}

/// A release skips a queued waiter that died (its deadline passed) and
/// hands the lock to the live waiter behind it, still in the one call.
#[test]
fn a_release_skips_a_dead_waiter_and_hands_the_lock_to_the_next() {
    let server = Server::start();
    let (holder, waiter) = (server.slow_locker(), server.slow_locker());
    let k = key("dead-head");
    holder.lock(&key("warm-up")).unwrap().unlock().unwrap();
    let held = holder.lock(&k).unwrap();
    // A crashed waiter at the head of the queue: last seen at 1 ms after
    // the epoch, for a stay of 1 ms.
    server.queue_dead_waiter(&k, "1:1:60000:ghost");
    let t = wait_behind(&server, &waiter, &k, Duration::from_secs(10), 2);
    let guard = hand_over(&server, held, t);
    let info = holder.holder(&k).unwrap().unwrap();
    assert_eq!(info.fencing_token(), guard.fencing_token());
    assert_ne!(info.metadata(), "ghost");
}
