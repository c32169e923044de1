//! Redlock asks its masters at once: a lock and an unlock from the
//! caller's thread (each request written before any reply is read), other
//! operations on threads the locker keeps. An operation starts no thread
//! (a spawn per operation per master was most of Redlock's cost on a
//! loaded machine), concurrent operations do not queue behind each other's
//! calls to a slow master, and the threads end with the locker.
//!
//! A test binary of its own: it counts the process's threads by name, and
//! other tests' lockers would come and go beside it.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::indexing_slicing)]
// A thread's end is no event a test can wait on: /proc is polled for it.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant};

use common::{fan_out_threads, holders_of, key, redlock_builder, servers};
use redmutex::Locker;
use redmutex_testkit::proxy::{Mode, Proxy};

#[test]
fn redlock_operations_start_no_thread_and_its_threads_end_with_the_locker() {
    let servers = servers(3);
    let locker = redlock_builder(&servers).build().unwrap();
    let k = key("rl-threads");
    locker.lock(&k).unwrap().unlock().unwrap();
    let kept = fan_out_threads();
    assert_eq!(
        kept.len(),
        2,
        "one thread per master past the first, kept between operations: {kept:?}"
    );
    for _ in 0..20 {
        let g = locker.lock(&k).unwrap();
        g.extend(Duration::from_secs(20)).unwrap();
        assert!(locker.holder(&k).unwrap().is_some());
        g.unlock().unwrap();
        assert_eq!(fan_out_threads(), kept, "an operation changed the threads");
    }
    let g = locker.lock(&k).unwrap();
    drop(locker);
    // A guard keeps what it needs to release alive.
    g.unlock().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fan_out_threads().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the fan-out threads outlived their locker: {:?}",
            fan_out_threads()
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // Four locks at once, each held up by the third master (its replies
    // stall): each reaches it without waiting for another's reply there.
    // Connections made ahead (a new one cannot be made through the stall),
    // a long I/O timeout (none gives up meanwhile).
    let masters = common::servers(3);
    let proxy = Proxy::start(masters[2].port());
    let pool = |url: &str| {
        r2d2::Pool::builder()
            .min_idle(Some(6))
            .test_on_check_out(false)
            .build(redis::Client::open(url).unwrap())
            .unwrap()
    };
    let locker = Locker::builder(pool(&masters[0].url()))
        .instance(pool(&masters[1].url()))
        .instance(pool(&proxy.url()))
        .ttl(Duration::from_secs(120))
        .io_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    locker.lock(&k).unwrap().unlock().unwrap();
    proxy.set(Mode::StallReplies);
    let keys: Vec<String> = (0..4).map(|t| format!("{k}-{t}")).collect();
    let locks: Vec<_> = keys
        .iter()
        .map(|k| {
            let (locker, k) = (locker.clone(), k.clone());
            std::thread::Builder::new()
                .spawn(move || locker.lock(&k).map(drop))
                .expect("spawn a locking thread")
        })
        .collect();
    common::wait_until(
        "every lock's acquire run on the stalled master",
        Duration::from_secs(10),
        || keys.iter().all(|k| holders_of(&masters[2..], k) == 1),
    );
    proxy.set(Mode::Pass);
    for l in locks {
        l.join().expect("a locking thread panicked").unwrap();
    }
}
