//! Waiters are served first come, first served: a queued waiter cannot be
//! overtaken, not even by the thread that just released the lock.
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{key, wait_until, Server};
use redmutex::Locker;

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
