//! Bounded barging (`Builder::barging`), an opt-in: while the waiter at the
//! head of a lock's queue has waited less than the quantum, a release frees
//! the lock instead of handing it over, and whoever asks first (the
//! releaser, again) may take it; once the head has waited the quantum, the
//! release hands the lock over as it always does. So no waiter waits past
//! its quantum plus the hold under way and one hand-over.
//!
//! The waiter at the head is planted in the queue here (a waiter that
//! never asks again): what is checked is what the scripts decide, by the
//! server's clock, with no race against a live waiter's retry.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::time::{Duration, Instant};

use common::{key, Server};
use redis::Commands;
use redmutex::{Error, Locker};

/// The server's clock in µs.
fn server_micros(server: &Server) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    secs * 1_000_000 + micros
}

/// Queues a waiter named `w` for `k` as a live one would (arrived now by
/// the server's clock, stays a minute, wants a 30 s TTL), at the head.
/// Returns its arrival, in µs.
fn plant_waiter(server: &Server, k: &str) -> u64 {
    let (queue, waiters) = common::queue_keys(None, k);
    let now = server_micros(server);
    let mut c = server.conn();
    let _: () = c.zadd(&queue, "w", now).unwrap();
    let entry = format!("{}:60000:30000:planted", now / 1000);
    let _: () = c.hset(&waiters, "w", entry).unwrap();
    now
}

fn owner_is_w(server: &Server, k: &str) -> bool {
    let v: Option<String> = server.conn().get(k).unwrap();
    v.is_some_and(|v| v.starts_with("w:"))
}

fn barging(server: &Server, quantum: Duration) -> Locker {
    Locker::builder(redmutex::pool(&server.url()).unwrap())
        .barging(quantum)
        .build()
        .unwrap()
}

#[test]
fn within_its_quantum_the_releaser_takes_the_lock_back() {
    let server = Server::start();
    // The default: a release hands the lock to the queued waiter.
    let k = key("strict");
    let strict = server.locker();
    let g = strict.lock(&k).unwrap();
    plant_waiter(&server, &k);
    g.unlock().unwrap();
    assert!(owner_is_w(&server, &k), "not handed over");
    assert!(strict.try_lock(&k).unwrap().is_none());
    // Barging: the lock is freed, and taken back, the waiter keeping its place.
    let k = key("barging");
    let locker = barging(&server, Duration::from_secs(60));
    let g = locker.lock(&k).unwrap();
    plant_waiter(&server, &k);
    g.unlock().unwrap();
    assert!(!owner_is_w(&server, &k), "handed over within the quantum");
    let again = locker.try_lock(&k).unwrap();
    assert!(again.is_some(), "the releaser could not take it back");
    let queued: u64 = server.conn().zcard(common::queue_keys(None, &k).0).unwrap();
    assert_eq!(queued, 1, "the waiter lost its place");
}

#[test]
fn once_the_head_waited_its_quantum_the_release_hands_over() {
    let server = Server::start();
    let k = key("quantum");
    let quantum = Duration::from_millis(200);
    let q = u64::try_from(quantum.as_micros()).unwrap();
    let locker = barging(&server, quantum);
    let mut g = locker.lock(&k).unwrap();
    let arrived = plant_waiter(&server, &k);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut barged = 0;
    loop {
        assert!(Instant::now() < deadline, "never handed over");
        let before = server_micros(&server);
        g.unlock().unwrap();
        let after = server_micros(&server);
        match locker.try_lock(&k).unwrap() {
            Some(again) => {
                // A release that freed the lock came before the quantum ran out.
                assert!(
                    before < arrived + q,
                    "barged {} µs after the head arrived (quantum {q} µs)",
                    before - arrived
                );
                barged += 1;
                g = again;
            }
            None => {
                let tried = server_micros(&server);
                if owner_is_w(&server, &k) {
                    assert!(
                        after >= arrived + q,
                        "handed over {} µs after the head arrived, within the quantum",
                        after - arrived
                    );
                } else {
                    // Freed within the quantum, and the quantum ran out
                    // before the attempt: the lock waits for the head.
                    assert!(tried >= arrived + q, "refused within the quantum");
                }
                break;
            }
        }
    }
    assert!(
        barged > 0,
        "no release within the quantum let the releaser back in"
    );
}

#[test]
fn a_live_waiter_is_not_starved_by_a_releaser_that_keeps_coming_back() {
    let server = Server::start();
    let k = key("starve");
    let locker = barging(&server, Duration::from_millis(20));
    let waiter = server.locker();
    let mut g = locker.lock(&k).unwrap();
    let w = {
        let k = k.clone();
        std::thread::Builder::new()
            .spawn(move || waiter.lock_timeout(&k, Duration::from_secs(20)).is_ok())
            .unwrap()
    };
    common::wait_until("the waiter is queued", Duration::from_secs(10), || {
        server
            .conn()
            .zcard::<_, u64>(common::queue_keys(None, &k).0)
            .unwrap()
            == 1
    });
    // The releaser comes back at once, every time, until the waiter is in.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !w.is_finished() {
        assert!(Instant::now() < deadline, "the waiter was starved");
        g.unlock().unwrap();
        g = locker.lock(&k).unwrap();
    }
    drop(g);
    assert!(w.join().unwrap(), "the waiter timed out");
}

#[test]
fn barging_needs_a_quantum_and_a_queue() {
    let server = Server::start();
    let pool = || redmutex::pool(&server.url()).unwrap();
    let zero = Locker::builder(pool()).barging(Duration::ZERO).build();
    assert!(matches!(zero, Err(Error::InvalidInput(_))), "{zero:?}");
    let servers = common::servers(3);
    let redlock = common::redlock_builder(&servers)
        .barging(Duration::from_millis(5))
        .build();
    assert!(
        matches!(redlock, Err(Error::InvalidInput(_))),
        "{redlock:?}"
    );
}
