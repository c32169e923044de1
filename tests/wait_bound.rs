//! How long a waiting `lock_timeout` may take past its wait when the
//! server stops answering (issue 38, the suspected waiting-time items).
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::time::{Duration, Instant};

use common::{key, Server};
use redmutex::{Backoff, Locker};
use redmutex_testkit::proxy::{Mode, Proxy};

/// A waiter's attempt that times out returns its error after that one
/// attempt: it does not spend another I/O timeout leaving the queue on the
/// server that just failed to answer (its place expires on its own within
/// its stay). Before, `lock_timeout` took two I/O timeouts here.
#[test]
fn a_waiter_whose_attempt_times_out_returns_after_that_attempt() {
    let server = Server::start();
    let k = key("wait-bound-error");
    let _held = server.locker().lock(&k).unwrap();
    let proxy = Proxy::start(server.port());
    let io = Duration::from_secs(2);
    let checkout = Duration::from_millis(100);
    let waiter = Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .io_timeout(io)
        .checkout_timeout(checkout)
        .build()
        .unwrap();
    let k2 = k.clone();
    let t = std::thread::spawn(move || {
        let r = waiter.lock_timeout(&k2, Duration::from_secs(60));
        (r.map(drop), Instant::now())
    });
    // Queued, and the listener subscribed: its start-up is behind us.
    common::queued_and_listening(&server, &k);
    proxy.set(Mode::StallReplies);
    let stalled = Instant::now();
    let (r, ended) = t.join().unwrap();
    let took = ended - stalled;
    assert!(r.as_ref().is_err_and(|e| e.is_connection()), "{r:?}");
    // One backoff pause and one attempt (checkout + I/O timeout), with a
    // generous second for a loaded machine; two I/O timeouts would be 4 s.
    let bound = Duration::from_millis(100) + checkout + io + Duration::from_millis(1000);
    assert!(
        took <= bound,
        "returned {took:?} after the stall (bound {bound:?})"
    );
}

/// A lock handed over to a waiter whose take-up ends in `Lost` (the claim
/// ran out on the server before the renewal that takes it up) does not
/// send the waiter into another attempt when it was asked to stop in the
/// meantime: that attempt, past the stop (or the wait's deadline), would
/// find the lock free and return it. Before, the loop retried at once.
#[test]
fn a_take_up_that_ends_lost_checks_the_stop_flag_before_retrying() {
    let server = Server::start();
    let k = key("wait-bound-take-up");
    let held = server.locker().lock(&k).unwrap();
    let proxy = Proxy::start(server.port());
    // A short TTL, so that the claim handed over (at most the TTL) runs out
    // while the server sleeps; an I/O timeout longer than the sleep, so that
    // the take-up's renewal gets its answer (a refusal) instead of a timeout.
    let waiter = Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .ttl(Duration::from_millis(500))
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .io_timeout(Duration::from_secs(10))
        // Without a watchdog `lock` takes the claim up before it returns
        // (with one, it returns the claim and its watchdog takes it up).
        .watchdog(false)
        .build()
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (k2, stop2) = (k.clone(), std::sync::Arc::clone(&stop));
    let t = std::thread::spawn(move || {
        waiter
            .lock_or_stop(&k2, None, &stop2)
            .map(|g| g.fencing_token())
    });
    common::queued_and_listening(&server, &k);
    // Right after one of the waiter's refreshes of its place (one a second),
    // so that none comes between the hand-over and its take-up.
    common::after_a_call(&server);
    let mut direct = server.conn();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    // The waiter hears of the hand-over, and renews, 40 ms late each way:
    // the server is asleep by then, past the claim.
    proxy.set(Mode::Delay);
    held.unlock().unwrap();
    let _: () = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("1.5")
        .query(&mut direct)
        .unwrap();
    let r = t.join().unwrap();
    assert!(
        matches!(r, Err(redmutex::Error::Cancelled { .. })),
        "a waiter asked to stop before its take-up failed got {r:?}"
    );
}

/// As above, for the wait's deadline: a deadline that passes during a
/// take-up that ends in `Lost` ends the wait with `Timeout`, instead of one
/// more attempt past it (which would find the lock free and return it).
#[test]
fn a_take_up_that_ends_lost_past_the_deadline_times_out() {
    let server = Server::start();
    let k = key("wait-bound-take-up-deadline");
    let held = server.locker().lock(&k).unwrap();
    let proxy = Proxy::start(server.port());
    let waiter = Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .ttl(Duration::from_millis(500))
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .io_timeout(Duration::from_secs(10))
        // Without a watchdog `lock` takes the claim up before it returns
        // (with one, it returns the claim and its watchdog takes it up).
        .watchdog(false)
        .build()
        .unwrap();
    let wait = Duration::from_millis(2500);
    let k2 = k.clone();
    let t = std::thread::spawn(move || waiter.lock_timeout(&k2, wait).map(|g| g.fencing_token()));
    common::queued_and_listening(&server, &k);
    common::after_a_call(&server);
    let mut direct = server.conn();
    proxy.set(Mode::Delay);
    held.unlock().unwrap();
    // The waiter's deadline (at most `wait` after it queued) passes while
    // the server sleeps through its take-up. (When the machine is so slow
    // that the deadline came before the hand-over, the waiter times out
    // on its own: the test passes without showing anything.)
    let _: () = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("4")
        .query(&mut direct)
        .unwrap();
    let r = t.join().unwrap();
    assert!(
        matches!(r, Err(redmutex::Error::Timeout { .. })),
        "a waiter whose deadline passed during a take-up that failed got {r:?}"
    );
}
