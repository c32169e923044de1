//! `Semaphore`: at most N holders at once over several lockers; permits of
//! a vanished holder come back after their TTL; the watchdog keeps them;
//! waiters queue first come, first served and a release wakes (hands its
//! permit to) the first; fencing tokens rise; a permit whose key is deleted
//! is reported lost.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{key, wait_until, woken_by_the_release, Server};
use redmutex::{Error, Locker};

/// The waiters queued for a permit of `name` (no prefix, one server).
fn queued(server: &Server, name: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(format!("__redmutex__:permit-queue:{name}"))
        .query(&mut server.conn())
        .unwrap_or(0)
}

/// The Redis keys of the permits of `name` that are held.
fn held_permits(server: &Server, name: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("__redmutex__:permit:*:{name}"))
        .query(&mut server.conn())
        .unwrap()
}

#[test]
fn never_more_holders_than_permits_over_several_lockers() {
    let server = Server::start();
    let name = key("limit");
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut threads = Vec::new();
    for l in 0..3 {
        let locker = server.locker(); // its own pool, as another process
        for _ in 0..4 {
            let sem = locker.semaphore(&name, 3).unwrap();
            let (now, most) = (Arc::clone(&now), Arc::clone(&most));
            threads.push(std::thread::spawn(move || {
                for _ in 0..15 {
                    let permit = sem.acquire_timeout(Duration::from_secs(60)).unwrap();
                    let holders = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(holders, Ordering::SeqCst);
                    assert!(holders <= 3, "{holders} holders of 3 permits (locker {l})");
                    std::thread::sleep(Duration::from_millis(2));
                    now.fetch_sub(1, Ordering::SeqCst);
                    permit.unlock().unwrap();
                }
            }));
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "the limit was never reached"
    );
    assert!(held_permits(&server, &name).is_empty());
}

#[test]
fn permits_run_out_and_come_back_on_release() {
    let server = Server::start();
    let name = key("count");
    let (a, b) = (server.locker(), server.locker());
    let sem = a.semaphore(&name, 2).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 2);
    let p1 = sem.acquire().unwrap();
    let p2 = b
        .semaphore(&name, 2)
        .unwrap()
        .try_acquire()
        .unwrap()
        .unwrap();
    assert_eq!(sem.available_permits().unwrap(), 0);
    assert!(sem.try_acquire().unwrap().is_none());
    drop(p1);
    assert_eq!(sem.available_permits().unwrap(), 1);
    let p3 = sem.try_acquire().unwrap().unwrap();
    assert!(p3.fencing_token() > p2.fencing_token());
    assert_eq!(p3.keys(), [name.as_str()]);
}

#[test]
fn a_vanished_holders_permit_comes_back_after_its_ttl() {
    let server = Server::start();
    let name = key("vanished");
    let ttl = Duration::from_millis(300);
    let crashed = server.builder().ttl(ttl).watchdog(false).build().unwrap();
    // A holder that vanishes without releasing: no watchdog, no drop.
    std::mem::forget(crashed.semaphore(&name, 1).unwrap().acquire().unwrap());
    let sem = server.locker().semaphore(&name, 1).unwrap();
    assert!(sem.try_acquire().unwrap().is_none());
    let permit = sem.acquire_timeout(Duration::from_secs(20)).unwrap();
    assert!(!permit.is_lost());
}

#[test]
fn the_watchdog_keeps_a_permit_for_many_ttls() {
    let server = Server::start();
    let name = key("kept");
    let ttl = Duration::from_millis(200);
    let sem = server.locker_with_ttl(ttl).semaphore(&name, 1).unwrap();
    let permit = sem.acquire().unwrap();
    let first = permit.valid_until();
    wait_until("five TTLs of renewals", Duration::from_secs(20), || {
        permit.valid_until() > first + 5 * ttl
    });
    assert!(!permit.is_lost());
    let other = server.locker().semaphore(&name, 1).unwrap();
    assert!(other.try_acquire().unwrap().is_none());
    permit.ensure_held().unwrap();
}

#[test]
fn a_release_hands_its_permit_to_the_waiter_not_its_backoff() {
    let server = Server::start();
    let name = key("wake");
    let held = server
        .locker()
        .semaphore(&name, 1)
        .unwrap()
        .acquire()
        .unwrap();
    // A minute of backoff: only the release can get it the permit soon.
    let waiter = server.slow_locker().semaphore(&name, 1).unwrap();
    let t = std::thread::spawn(move || {
        let start = std::time::Instant::now();
        (
            waiter.acquire_timeout(Duration::from_secs(30)),
            start.elapsed(),
        )
    });
    wait_until("the waiter queued", Duration::from_secs(20), || {
        queued(&server, &name) == 1
    });
    drop(held);
    woken_by_the_release(t);
}

#[test]
fn waiters_get_permits_in_arrival_order() {
    let server = Server::start();
    let name = key("fifo");
    let holder = server.locker().semaphore(&name, 2).unwrap();
    let held = (holder.acquire().unwrap(), holder.acquire().unwrap());
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for id in 1..=3 {
        let sem = server.locker().semaphore(&name, 2).unwrap();
        let order = Arc::clone(&order);
        waiters.push(std::thread::spawn(move || {
            let p = sem.acquire_timeout(Duration::from_secs(30)).unwrap();
            order.lock().unwrap().push(id);
            p
        }));
        wait_until("the waiter queued", Duration::from_secs(20), || {
            queued(&server, &name) == id
        });
    }
    // One permit back: the first waiter gets it, and try_acquire does not
    // jump the two still queued.
    drop(held.0);
    wait_until("the first waiter served", Duration::from_secs(20), || {
        order.lock().unwrap().len() == 1
    });
    assert!(holder.try_acquire().unwrap().is_none(), "jumped the queue");
    drop(held.1);
    let mut permits = Vec::new();
    for (i, w) in waiters.into_iter().enumerate() {
        if i == 2 {
            // The third waits for one of the first two's permits.
            drop(permits.remove(0));
        }
        permits.push(w.join().unwrap());
    }
    assert_eq!(*order.lock().unwrap(), [1, 2, 3]);
}

#[test]
fn no_worker_starves_under_steady_contention() {
    let server = Server::start();
    let name = key("fair");
    let counts = Arc::new(Mutex::new(vec![0u32; 6]));
    let total = Arc::new(AtomicUsize::new(0));
    let lockers = [server.locker(), server.locker()];
    let mut threads = Vec::new();
    for w in 0..6 {
        let sem = lockers[w % 2].semaphore(&name, 2).unwrap();
        let (counts, total) = (Arc::clone(&counts), Arc::clone(&total));
        threads.push(std::thread::spawn(move || {
            while total.load(Ordering::SeqCst) < 300 {
                let p = sem.acquire_timeout(Duration::from_secs(60)).unwrap();
                total.fetch_add(1, Ordering::SeqCst);
                counts.lock().unwrap()[w] += 1;
                std::thread::sleep(Duration::from_millis(1));
                drop(p);
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let counts = counts.lock().unwrap().clone();
    let (least, most) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
    // First come, first served: every worker gets its turn in each round.
    assert!(least > 0 && most <= 2 * least + 2, "uneven: {counts:?}");
}

#[test]
fn fencing_tokens_rise_with_every_permit_and_lock() {
    let server = Server::start();
    let name = key("fence");
    let locker = server.locker();
    let sem = locker.semaphore(&name, 3).unwrap();
    let mut last = 0;
    for _ in 0..5 {
        let permit = sem.acquire().unwrap();
        assert!(permit.fencing_token() > last);
        last = permit.fencing_token();
        let lock = locker.lock(&name).unwrap(); // a lock of the same name is apart
        assert!(lock.fencing_token() > last);
        last = lock.fencing_token();
    }
}

#[test]
fn a_permit_whose_key_is_deleted_is_lost() {
    let server = Server::start();
    let name = key("deleted");
    let sem = server
        .locker_with_ttl(Duration::from_millis(300))
        .semaphore(&name, 2)
        .unwrap();
    let permit = sem.acquire().unwrap();
    let keys = held_permits(&server, &name);
    assert_eq!(keys.len(), 1);
    let _: i64 = redis::cmd("DEL")
        .arg(&keys[0])
        .query(&mut server.conn())
        .unwrap();
    assert!(permit.wait_lost(Duration::from_secs(10)), "not told");
    assert!(matches!(permit.ensure_held(), Err(Error::Lost { .. })));
}

#[test]
fn bad_input_is_invalid_input() {
    let server = Server::start();
    let locker = server.locker();
    for (name, permits) in [("x", 0), ("", 1), ("a__redmutex__b", 1), ("x", 1025)] {
        match locker.semaphore(name, permits) {
            Err(Error::InvalidInput(_)) => {}
            other => panic!("{name:?} {permits}: {other:?}"),
        }
    }
    let redlock = Locker::builder(redmutex::pool(&server.url()).unwrap())
        .instance(redmutex::pool(&server.url()).unwrap())
        .instance(redmutex::pool(&server.url()).unwrap())
        .build()
        .unwrap();
    assert!(matches!(
        redlock.semaphore("x", 2),
        Err(Error::InvalidInput(_))
    ));
}
