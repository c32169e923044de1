//! Waiters are served first come, first served: a queued waiter cannot be
//! overtaken, not even by the thread that just released the lock.
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{key, wait_until, Server};
use redmutex::{Backoff, Locker};
use redmutex_testkit::proxy::{Mode, Proxy};

fn queued(server: &Server, k: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(common::queue_keys(None, k).0)
        .query(&mut server.conn())
        .unwrap_or(0)
}

#[test]
fn waiters_get_the_lock_in_arrival_order_and_the_releaser_queues_behind() {
    let server = Server::start();
    let k = key("fifo");
    let holder = server.locker();
    let held = holder.lock(&k).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for id in 1..=3 {
        let locker: Locker = server.locker(); // its own pool, as another process
        let (k2, order) = (k.clone(), Arc::clone(&order));
        waiters.push(std::thread::spawn(move || {
            let g = locker.lock_timeout(&k2, Duration::from_secs(30)).unwrap();
            order.lock().unwrap().push(id);
            drop(g);
        }));
        // The next waiter starts only once this one is in the queue.
        wait_until("the waiter queued", Duration::from_secs(20), || {
            queued(&server, &k) == id
        });
    }
    // Release and take it again at once: the queued waiters go first.
    drop(held);
    let again = holder.lock_timeout(&k, Duration::from_secs(30)).unwrap();
    order.lock().unwrap().push(0);
    drop(again);
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [1, 2, 3, 0]);
    // Nobody waits any more: the queue is gone.
    assert_eq!(queued(&server, &k), 0);
}

#[test]
fn try_lock_does_not_jump_the_queue() {
    let server = Server::start();
    let k = key("no-jump");
    let holder = server.locker();
    let held = holder.lock(&k).unwrap();
    let waiter = server.locker();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let t = {
        let k = k.clone();
        std::thread::spawn(move || {
            let g = waiter.lock_timeout(&k, Duration::from_secs(30)).unwrap();
            // Holds it until the test says so.
            release_rx.recv().unwrap();
            drop(g);
        })
    };
    wait_until("the waiter queued", Duration::from_secs(20), || {
        queued(&server, &k) == 1
    });
    // Release, then try at once: the lock is either still free with the
    // waiter queued first, or already the waiter's. Never ours.
    drop(held);
    let other = server.locker();
    assert!(
        other.try_lock(&k).unwrap().is_none(),
        "try_lock overtook a queued waiter"
    );
    release_tx.send(()).unwrap();
    t.join().unwrap();
    assert!(other.try_lock(&k).unwrap().is_some());
}

#[test]
fn a_dead_waiter_holds_the_line_only_until_its_deadline() {
    let server = Server::start();
    let k = key("dead-waiter");
    // A queue entry whose deadline has passed, as a crashed waiter leaves.
    server.queue_dead_waiter(&k, "1");
    let locker = server.locker();
    assert!(
        locker.try_lock(&k).unwrap().is_some(),
        "a dead entry must not block"
    );
    assert_eq!(queued(&server, &k), 0, "the dead entry was dropped");
}

/// The waiters' hash entry of the only waiter on `k`:
/// `<ms>:<stay ms>:<ttl ms>:<metadata>`, as `(ms, stay ms)`.
fn waiter_entry(server: &Server, k: &str) -> Option<(u64, u64)> {
    let entries: Vec<String> = redis::cmd("HVALS")
        .arg(common::queue_keys(None, k).1)
        .query(&mut server.conn())
        .unwrap_or_default();
    let mut fields = entries.first()?.split(':');
    let at = fields.next()?.parse().ok()?;
    let stay = fields.next()?.parse().ok()?;
    Some((at, stay))
}

/// The most a waiter's stay may be, whatever its backoff and timeouts
/// (see "Waiting" in the crate docs).
const MAX_STAY_MS: u64 = 3000;

/// Issue 38, hole 4: a waiter with a minute of backoff, dead while queued
/// (its process gone: here its link goes dark), blocks a free lock for at
/// most its stay, a few seconds, not for its backoff.
#[test]
fn a_dead_waiter_with_a_slow_backoff_blocks_a_free_lock_for_seconds_only() {
    let server = Server::start();
    let k = key("dead-slow-waiter");
    let held = server
        .locker_with_ttl(Duration::from_secs(2))
        .lock(&k)
        .unwrap();
    let proxy = Proxy::start(server.port());
    let waiter = Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .ttl(Duration::from_secs(2))
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .io_timeout(Duration::from_millis(500))
        .checkout_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let k2 = k.clone();
    // Never joined: on a failure it would wait out its minute.
    let _waiter = std::thread::spawn(move || waiter.lock_timeout(&k2, Duration::from_secs(120)));
    wait_until("the waiter queued", Duration::from_secs(20), || {
        queued(&server, &k) == 1
    });
    proxy.set(Mode::Blackhole);
    let (_, stay) = waiter_entry(&server, &k).expect("the waiter's entry");
    // The holder ends with `expire_at`: nothing is handed over, the lock
    // becomes free with the dead waiter still at the head of the queue.
    held.expire_at(std::time::Instant::now() + Duration::from_millis(100))
        .unwrap();
    let other = server.locker();
    let (got, took) = common::timed(|| other.lock_timeout(&k, Duration::from_secs(20)));
    assert!(
        stay <= MAX_STAY_MS,
        "the dead waiter's place lasts {stay} ms after its last call"
    );
    assert!(
        got.is_ok(),
        "a free lock stayed refused for {took:?} behind a dead waiter: {got:?}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
}

/// The other half of hole 4's fix: a live waiter whose backoff is longer
/// than its stay keeps its place (it refreshes it), and the release hands
/// the lock to it, not to a waiter that came later.
#[test]
fn a_live_waiter_with_a_slow_backoff_keeps_its_place() {
    let server = Server::start();
    let k = key("live-slow-waiter");
    let held = server.locker().lock(&k).unwrap();
    let slow = server.slow_locker();
    let k2 = k.clone();
    let first = std::thread::spawn(move || {
        slow.lock_timeout(&k2, Duration::from_secs(60))
            .map(|g| g.fencing_token())
    });
    wait_until("the slow waiter queued", Duration::from_secs(20), || {
        queued(&server, &k) == 1
    });
    let (at, stay) = waiter_entry(&server, &k).unwrap();
    // Its place outlives its stay: refreshed (as the server sees it) past
    // the end of the first stay.
    wait_until(
        "the slow waiter refreshed its place",
        Duration::from_secs(30),
        || waiter_entry(&server, &k).is_some_and(|(now, _)| now > at + stay),
    );
    let later = server.locker();
    let k3 = k.clone();
    let second = std::thread::spawn(move || {
        later
            .lock_timeout(&k3, Duration::from_secs(60))
            .map(|g| g.fencing_token())
    });
    wait_until("the second waiter queued", Duration::from_secs(20), || {
        queued(&server, &k) == 2
    });
    held.unlock().unwrap();
    let a = first.join().unwrap().unwrap();
    let b = second.join().unwrap().unwrap();
    assert!(a < b, "the slow waiter, first in line, was served second");
}
