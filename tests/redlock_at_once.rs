//! A Redlock lock and unlock ask every master from the caller's thread,
//! each request written before any reply is read (issue 46 item 5): on a
//! warm locker they wake none of the locker's fan-out threads.
//!
//! A test binary of its own: it watches the process's threads by name, and
//! other tests' lockers would come and go beside it.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{fan_out_threads, key, redlock_builder, servers};

/// The voluntary context switches of this process's fan-out threads so
/// far, summed: how often they were woken.
fn fan_out_wake_ups() -> u64 {
    fan_out_threads()
        .iter()
        .filter_map(|tid| {
            let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .sum()
}

/// A lock and an unlock ask every master from the caller's thread (each
/// request written before any reply is read): on a warm locker they wake
/// no other thread, whose wake-up per call cost more than the round trip
/// on a busy machine (issue 46 item 5: three local masters cost 1.39 times
/// one instance, five 2.00).
#[test]
fn a_warm_redlock_lock_and_unlock_wake_no_thread() {
    let servers = servers(3);
    let locker = redlock_builder(&servers).watchdog(false).build().unwrap();
    let k = key("rl-at-once");
    // Warm: every server's version checked, the fan-out threads started
    // (by the first acquisition), connections made.
    for _ in 0..5 {
        locker.lock(&k).unwrap().unlock().unwrap();
    }
    assert!(!fan_out_threads().is_empty(), "no fan-out thread to watch");
    let before = fan_out_wake_ups();
    for _ in 0..100 {
        locker.lock(&k).unwrap().unlock().unwrap();
    }
    let woken = fan_out_wake_ups() - before;
    assert!(
        woken < 10,
        "100 locks and unlocks woke the fan-out threads {woken} times"
    );
}
