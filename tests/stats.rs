//! `Locker::stats`: the live figures count a scripted workload exactly
//! (grants, hand-overs, busy answers, timeouts, losses by reason, failed
//! renewals, wait and hold times), are shared by clones and the primitives
//! made from a locker, start again from zero after `reset_stats`, and are
//! not recorded at all with `Builder::stats(false)`.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::time::{Duration, Instant};

use common::{key, Server};
use redmutex::{Backoff, Error};

fn queued(server: &Server, k: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(common::queue_keys(None, k).0)
        .query(&mut server.conn())
        .unwrap()
}

#[test]
fn stats_count_a_scripted_workload_exactly() {
    let server = Server::start();
    let start = Instant::now();
    // A minute of lease (no watchdog renewal comes due during the test) and
    // of backoff (a waiter gets the lock only by a hand-over), and a short
    // I/O timeout for the renewal that fails.
    let locker = server
        .builder()
        .ttl(Duration::from_secs(60))
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let fresh = locker.stats();
    assert_eq!(fresh.grants(), 0);
    assert_eq!(fresh.wait().count(), 0);
    assert_eq!(fresh.wait().max(), Duration::ZERO);

    // 3 grants, each released.
    for i in 0..3 {
        locker
            .lock(key(&format!("plain-{i}")))
            .unwrap()
            .unlock()
            .unwrap();
    }

    // 2 busy try_locks (one through a clone: clones share the figures),
    // then a waiting call that times out.
    let busy = key("busy");
    let held = locker.lock(&busy).unwrap();
    let held_at = Instant::now();
    // From another thread: this one would be told it holds it already.
    assert!(common::elsewhere(|| locker
        .try_lock(&busy)
        .unwrap()
        .is_none()));
    assert!(common::elsewhere(|| locker
        .clone()
        .try_lock(&busy)
        .unwrap()
        .is_none()));
    match common::elsewhere(|| locker.lock_timeout(&busy, Duration::from_millis(100))) {
        Err(Error::Timeout { .. }) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    held.unlock().unwrap();
    let held_for = held_at.elapsed();

    // A hand-over: a waiter queued behind a holder is handed the lock by
    // its release (with a minute of backoff, nothing else can get it there).
    common::wait_until(
        "the release listener is up",
        Duration::from_secs(10),
        || server.release_subscribers() == 1,
    );
    let handed = key("handed");
    let holder = locker.lock(&handed).unwrap();
    let waiter = {
        let (locker, handed) = (locker.clone(), handed.clone());
        std::thread::Builder::new()
            .spawn(move || locker.lock_timeout(&handed, Duration::from_secs(30)))
            .unwrap()
    };
    common::wait_until("the waiter is queued", Duration::from_secs(10), || {
        queued(&server, &handed) == 1
    });
    holder.unlock().unwrap();
    waiter.join().unwrap().unwrap().unlock().unwrap();

    // A lease lost because its key was deleted: the next renewal says so.
    let lost = key("lost");
    let guard = locker.lock(&lost).unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&lost)
        .query(&mut server.conn())
        .unwrap();
    assert!(matches!(
        guard.extend(Duration::from_secs(60)),
        Err(Error::Lost { .. })
    ));
    drop(guard); // counted once, not again at its release

    // A renewal that fails: the server does not answer within the I/O
    // timeout (the lease stays, and the release succeeds afterwards).
    let renewed = key("renewed");
    let guard = locker.lock(&renewed).unwrap();
    server.pause();
    let failed = guard.extend(Duration::from_secs(60));
    server.resume();
    assert!(failed.is_err(), "{failed:?}");
    guard.unlock().unwrap();

    // A permit of a semaphore made from the locker: the same figures.
    let sem = locker.semaphore(key("sem"), 2).unwrap();
    sem.acquire().unwrap().unlock().unwrap();

    let s = locker.stats();
    // plain 3, busy 1, handed 2 (holder and waiter), lost 1, renewed 1, permit 1
    assert_eq!(s.grants(), 9, "{s:?}");
    assert_eq!(s.hand_overs(), 1, "{s:?}");
    assert_eq!(s.busy(), 2, "{s:?}");
    assert_eq!(s.timeouts(), 1, "{s:?}");
    assert_eq!(s.losses(), 1, "{s:?}");
    assert_eq!(s.losses_not_ours(), 1, "{s:?}");
    assert_eq!(s.losses_expired(), 0, "{s:?}");
    assert_eq!(s.failed_renewals(), 1, "{s:?}");
    assert_eq!(s.wait().count(), 9, "one wait per grant: {s:?}");
    assert_eq!(s.hold().count(), 9, "one hold per guard ended: {s:?}");
    // The busy key was held across a 100 ms timeout: the longest hold is
    // at least that, and none is longer than the test.
    assert!(s.hold().max() >= Duration::from_millis(100), "{s:?}");
    assert!(s.hold().max() <= held_for.max(start.elapsed()), "{s:?}");
    assert!(s.hold().p50() <= s.hold().p99() && s.hold().p99() <= s.hold().max());
    assert!(s.wait().max() <= start.elapsed(), "{s:?}");
    assert!(s.elapsed() >= start.elapsed().saturating_sub(Duration::from_secs(1)));

    // A reset returns what it cleared, and the figures start again.
    let cleared = locker.reset_stats();
    assert_eq!(cleared.grants(), 9);
    assert_eq!(cleared.busy(), 2);
    assert_eq!(cleared.hold().count(), 9);
    let after = locker.stats();
    assert_eq!(after.grants(), 0, "{after:?}");
    assert_eq!(after.busy(), 0);
    assert_eq!(after.losses(), 0);
    assert_eq!(after.failed_renewals(), 0);
    assert_eq!(after.wait().count(), 0);
    assert_eq!(after.hold().max(), Duration::ZERO);
    locker.lock(key("again")).unwrap().unlock().unwrap();
    let again = locker.stats();
    assert_eq!((again.grants(), again.hold().count()), (1, 1), "{again:?}");
}

#[test]
fn a_lease_that_runs_out_is_counted_as_expired() {
    // Without a watchdog the lease runs out; its loss is counted once,
    // when it is seen (here at the guard's end), as expired.
    let server = Server::start();
    let locker = server
        .builder()
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .build()
        .unwrap();
    let guard = locker.lock(key("expires")).unwrap();
    assert!(guard.wait_lost(Duration::from_secs(30)));
    assert!(matches!(guard.unlock(), Err(Error::Lost { .. })));
    let s = locker.stats();
    assert_eq!(s.grants(), 1, "{s:?}");
    assert_eq!(s.losses(), 1, "{s:?}");
    assert_eq!(s.losses_expired(), 1, "{s:?}");
    assert_eq!(s.losses_not_ours(), 0, "{s:?}");
    assert_eq!(s.hold().count(), 1, "{s:?}");
}

#[test]
fn stats_off_records_nothing() {
    let server = Server::start();
    let locker = server.builder().stats(false).build().unwrap();
    let k = key("off");
    let guard = locker.lock(&k).unwrap();
    assert!(common::elsewhere(|| locker.try_lock(&k).unwrap().is_none()));
    guard.unlock().unwrap();
    let s = locker.stats();
    assert_eq!((s.grants(), s.busy(), s.hold().count()), (0, 0, 0), "{s:?}");
}

#[test]
fn a_loss_the_watchdog_finds_is_counted_while_its_guard_lives() {
    // The watchdog's renewal finds the key gone: the loss counts at once,
    // not when the guard ends, and only once.
    let server = Server::start();
    let locker = server.locker_with_ttl(Duration::from_millis(900));
    let k = key("watched");
    let guard = locker.lock(&k).unwrap();
    let _: () = redis::cmd("DEL").arg(&k).query(&mut server.conn()).unwrap();
    assert!(guard.wait_lost(Duration::from_secs(30)));
    let s = locker.stats();
    assert_eq!((s.losses(), s.losses_not_ours()), (1, 1), "{s:?}");
    assert_eq!(s.hold().count(), 0, "the guard still lives: {s:?}");
    drop(guard);
    let s = locker.stats();
    assert_eq!((s.losses(), s.hold().count()), (1, 1), "{s:?}");
}

#[test]
fn a_hold_broken_by_an_operator_is_counted_as_broken() {
    // Losses by reason: an operator's break is its own reason, not "the key
    // was gone" (which says Redis lost it, a restart or an eviction).
    let server = Server::start();
    let locker = server.locker_with_ttl(Duration::from_millis(900));
    let k = key("broken");
    let guard = locker.lock(&k).unwrap();
    let was = locker.break_lock(&k, "stuck").unwrap();
    assert!(was.is_some());
    assert!(guard.wait_lost(Duration::from_secs(30)));
    let s = locker.stats();
    assert_eq!(
        (s.losses(), s.losses_broken(), s.losses_not_ours()),
        (1, 1, 0),
        "{s:?}"
    );
}
