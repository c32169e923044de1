//! Redlock asks its masters at once, on threads the locker keeps: an
//! operation starts no thread (a spawn per operation per master was most
//! of Redlock's cost on a loaded machine), concurrent operations do not
//! queue behind each other's calls to a slow master, and the threads end
//! with the locker.
//!
//! A test binary of its own: it counts the process's threads by name, and
//! other tests' lockers would come and go beside it.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used)]
// A thread's end is no event a test can wait on: /proc is polled for it.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{key, redlock_builder, servers};
use redmutex::Locker;
use redmutex_testkit::proxy::{Mode, Proxy};

/// The name the fan-out threads carry (Linux keeps its first 15 bytes).
const NAME: &str = "redmutex-redloc";

/// The ids of this process's fan-out threads.
fn fan_out_threads() -> BTreeSet<u64> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("read /proc/self/task");
    tasks
        .filter_map(|t| {
            let t = t.ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            let tid = t.file_name().to_str()?.parse().ok()?;
            comm.trim().starts_with(NAME).then_some(tid)
        })
        .collect()
}

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
    // stall): each call there has a thread of its own, none waits for
    // another's.
    let masters = common::servers(3);
    let proxy = Proxy::start(masters[2].port());
    let pool = |url: &str| redmutex::pool(url).unwrap();
    let locker = Locker::builder(pool(&masters[0].url()))
        .instance(pool(&masters[1].url()))
        .instance(pool(&proxy.url()))
        .build()
        .unwrap();
    locker.lock(&k).unwrap().unlock().unwrap();
    proxy.set(Mode::StallReplies);
    let locks: Vec<_> = (0..4)
        .map(|t| {
            let (locker, k) = (locker.clone(), format!("{k}-{t}"));
            std::thread::Builder::new()
                .spawn(move || locker.lock(&k).map(drop))
                .expect("spawn a locking thread")
        })
        .collect();
    common::wait_until(
        "a fan-out thread for each stalled call, and one for the other master",
        Duration::from_secs(10),
        || fan_out_threads().len() >= 5,
    );
    proxy.set(Mode::Pass);
    for l in locks {
        l.join().expect("a locking thread panicked").unwrap();
    }
}
