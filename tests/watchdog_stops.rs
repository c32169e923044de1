//! A guard's watchdog thread ends with the guard (`drop` or `unlock`) and
//! when its lease is lost. Alone in its own test binary so that no other
//! test's watchdog threads are counted.
//!
//! That `drop` *joins* the thread (no renewal can start after it returns) is
//! shown by the unit test in `src/watchdog.rs`: the renew closure is gone the
//! moment the handle's drop returns. Here the thread count is polled with a
//! bound, because a new thread names itself only once it runs, and an exited
//! one leaves `/proc` a moment after it is joined.

mod common;

use std::time::{Duration, Instant};

use common::{key, Server};
use redis::Commands;

/// Threads of this process named like a watchdog (Linux truncates names to
/// 15 bytes).
#[allow(clippy::expect_used)] // a helper of the test: failing loudly is the point
fn watchdogs() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task (these tests run on Linux)")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "redmutex-watchd")
        .count()
}

/// Waits (bounded, for a loaded machine) until exactly `n` watchdogs run.
fn expect_watchdogs(n: usize, why: &str) {
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut seen = watchdogs();
    while seen != n && Instant::now() < give_up {
        std::thread::yield_now();
        seen = watchdogs();
    }
    assert_eq!(seen, n, "{why}");
}

#[test]
fn watchdog_threads_end_with_their_guards() {
    let server = Server::start();
    let locker = server
        .builder()
        .ttl(Duration::from_millis(300))
        .build()
        .unwrap();
    expect_watchdogs(0, "none before any lock");

    let a = locker.lock(&key("a")).unwrap();
    let b = locker.lock_all(&[&key("b1"), &key("b2")]).unwrap();
    expect_watchdogs(2, "one per guard");
    drop(a);
    expect_watchdogs(1, "drop ends the watchdog");
    b.unlock().unwrap();
    expect_watchdogs(0, "unlock ends the watchdog");

    // A lost lease ends its watchdog for good, even while the guard lives.
    let c = locker.lock(&key("c")).unwrap();
    expect_watchdogs(1, "c has one");
    let _: () = server.conn().del(key("c")).unwrap();
    assert!(c.wait_lost(Duration::from_secs(20)));
    expect_watchdogs(0, "a lost lease's watchdog stops");
    drop(c);

    // Without a watchdog no thread is started at all.
    let plain = server.builder().watchdog(false).build().unwrap();
    let _d = plain.lock(&key("d")).unwrap();
    expect_watchdogs(0, "watchdog(false) starts none");
}
