//! A guard's watchdog stops when the guard goes (`drop` or `unlock`) and
//! when its lease is lost, taking a lock spawns no thread once a parked
//! worker is available, and a guard gone before its first renewal never
//! takes one. Alone in its own test binary so that no other test's
//! watchdogs are counted.
//!
//! That no renewal *starts* after a guard's drop returns is shown by the
//! unit tests of `Lease::stop` and the watchdog (`src/lease/mod.rs`,
//! `src/lease/watchdog.rs`); here the threads are counted, with bounded waits,
//! since a worker finishes and parks on its own a moment after the drop.

mod common;

use std::time::Duration;

use common::{key, wait_until, Server};
use redis::Commands;
use redmutex::watchdog_threads;

fn running() -> usize {
    watchdog_threads().running
}

/// Threads of this process named like a watchdog worker (Linux truncates
/// names to 15 bytes), running or parked.
#[allow(clippy::expect_used)] // a helper of the test: failing loudly is the point
fn worker_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task (these tests run on Linux)")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "redmutex-watchd")
        .count()
}

/// Waits (bounded, for a loaded machine) until `running()` is `n`: a new
/// watchdog counts itself once its worker picks it up.
fn expect_running(n: usize, why: &str) {
    wait_until(why, Duration::from_secs(10), || running() == n);
}

#[test]
fn watchdogs_end_with_their_guards_and_threads_are_reused() {
    let server = Server::start();
    let locker = server.locker_with_ttl(Duration::from_millis(300));
    assert_eq!(running(), 0, "none before any lock");

    let a = locker.lock(&key("a")).unwrap();
    let b = locker.lock_all(&[&key("b1"), &key("b2")]).unwrap();
    expect_running(2, "one per guard");
    drop(a);
    expect_running(1, "drop ends the watchdog");
    b.unlock().unwrap();
    expect_running(0, "unlock ends the watchdog");

    // A lost lease ends its watchdog for good, even while the guard lives.
    let c = locker.lock(&key("c")).unwrap();
    expect_running(1, "c has one");
    let _: () = server.conn().del(key("c")).unwrap();
    assert!(c.wait_lost(Duration::from_secs(20)));
    expect_running(0, "a lost lease's watchdog stops");
    drop(c);

    // Without a watchdog nothing runs.
    let plain = server.builder().watchdog(false).build().unwrap();
    let _d = plain.lock(&key("d")).unwrap();
    assert_eq!(running(), 0, "watchdog(false) runs none");

    // Parked workers are reused: 50 lock/unlock cycles add at most the odd
    // thread (when a worker has not parked yet by the next lock), not 50.
    let before = worker_threads();
    for i in 0..50 {
        let g = locker.lock(&key(&format!("cycle{i}"))).unwrap();
        drop(g);
    }
    let after = worker_threads();
    assert!(after <= before + 3, "{before} worker threads, then {after}");
    expect_running(0, "all stopped");
    assert_eq!(watchdog_threads().pending, 0, "none left to start");

    // A guard gone before its first renewal is due never takes a thread.
    let long = server.locker_with_ttl(Duration::from_secs(60));
    let g = long.lock(&key("short-lived")).unwrap();
    assert_eq!(
        watchdog_threads().pending,
        1,
        "its watchdog waits for its time"
    );
    assert_eq!(running(), 0, "no thread before the first renewal is due");
    drop(g);
    assert_eq!(
        watchdog_threads().pending,
        0,
        "dropped: nothing left to start"
    );
    assert_eq!(running(), 0);
}
