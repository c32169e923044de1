//! A forked child takes locks of its own: its guards' watchdogs run, even
//! when the parent used watchdogs before the fork (issue 38, hole 3).
#![allow(clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::time::Duration;

use common::{key, wait_until, Server};
use redmutex::Locker;
use redmutex_testkit::fork;

/// The child's exit codes.
const HELD: i32 = 0;
const LOST: i32 = 1;
const NOT_RENEWED: i32 = 2;
const FAILED: i32 = 3;

/// In the child: a 900 ms lock, held for about three TTLs; `HELD` when its
/// watchdog kept it (the guard never lost, the key still ours on the
/// server with a TTL renewed past the grant's), else why not.
fn hold_past_its_ttl(url: &str, k: &str) -> i32 {
    let Ok(pool) = redmutex::pool(url) else {
        return FAILED;
    };
    let Ok(locker) = Locker::builder(pool)
        .ttl(Duration::from_millis(900))
        .build()
    else {
        return FAILED;
    };
    let Ok(guard) = locker.lock(k) else {
        return FAILED;
    };
    if guard.wait_lost(Duration::from_millis(2700)) || guard.ensure_held().is_err() {
        return LOST;
    }
    // Server-side: the key is still there, 2.7 s after a 900 ms grant.
    let Ok(mut c) = redis::Client::open(url).and_then(|c| c.get_connection()) else {
        return FAILED;
    };
    let pttl: i64 = redis::cmd("PTTL").arg(k).query(&mut c).unwrap_or(-2);
    if pttl <= 0 {
        return NOT_RENEWED;
    }
    match guard.unlock() {
        Ok(()) => HELD,
        Err(_) => LOST,
    }
}

/// The parent's locker: a 300 ms TTL, over a pool whose threads end as
/// soon as it is dropped (no reaper job scheduled: no idle timeout nor
/// maximum lifetime).
fn parent_locker(server: &Server) -> Locker {
    let pool = r2d2::Pool::builder()
        .max_size(8)
        .test_on_check_out(false)
        .idle_timeout(None)
        .max_lifetime(None)
        .build(redis::Client::open(server.url()).unwrap())
        .unwrap();
    Locker::builder(pool)
        .ttl(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// How many threads of this process have a name starting with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .filter(|name| name.starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_forked_childs_watchdog_renews_after_the_parent_used_one() {
    let server = Server::start();
    // The parent uses a watchdog first: its starter thread and a parked
    // worker exist, in the parent only.
    let parent = parent_locker(&server);
    let g = parent.lock(&key("fork-parent")).unwrap();
    wait_until("the parent's watchdog ran", Duration::from_secs(10), || {
        redmutex::watchdog_threads().running > 0
    });
    drop(g);
    wait_until("its worker parked", Duration::from_secs(10), || {
        redmutex::watchdog_threads().parked > 0
    });
    // The parent's pool goes before the fork (see "Forked processes" in the
    // crate docs): r2d2's scheduler threads wait in `parking_lot`, whose
    // queue of waiting threads a fork leaves naming threads of the parent,
    // and the child's new threads reuse their stacks.
    drop(parent);
    wait_until("the pool's threads ended", Duration::from_secs(10), || {
        threads_named("r2d2") == 0
    });
    let (url, k) = (server.url(), key("fork-child"));
    let code = fork::in_child(|| hold_past_its_ttl(&url, &k));
    assert_eq!(
        code,
        Some(HELD),
        "the child's lock (1: lost, 2: not renewed)"
    );
    // The parent's own watchdog still works after the fork.
    let parent = parent_locker(&server);
    let g = parent.lock(&key("fork-parent-after")).unwrap();
    assert!(
        !g.wait_lost(Duration::from_millis(1000)),
        "the parent lost its lock"
    );
    g.unlock().unwrap();
}

/// A guard a forked child inherited is its parent's: dropping it in the
/// child neither deletes the parent's key nor stops the parent's watchdog
/// (issue 38 follow-up). Before, the child's drop released the parent's lock.
#[test]
fn dropping_an_inherited_guard_in_a_child_leaves_the_parents_lock() {
    let server = Server::start();
    let k = key("fork-inherited");
    let parent = parent_locker(&server);
    let guard = parent.lock(&k).unwrap();
    wait_until("the parent's watchdog ran", Duration::from_secs(10), || {
        redmutex::watchdog_threads().running > 0
    });
    let owner = common::owner_of(&server, &k);
    assert!(owner.is_some(), "the parent's key is there before the fork");
    let mut slot = Some(guard);
    // The child drops its copy of the guard and exits normally.
    let code = fork::in_child(|| {
        drop(slot.take());
        0
    });
    assert_eq!(code, Some(0), "the child exited normally");
    let guard = slot.take().unwrap();
    // The key is still the parent's, and its watchdog still renews it: it
    // is there three TTLs (300 ms) later, with a live TTL.
    assert!(
        !guard.wait_lost(Duration::from_millis(900)),
        "the parent lost its lock after the child dropped its copy"
    );
    assert_eq!(common::owner_of(&server, &k), owner, "the key's owner");
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&k)
        .query(&mut server.conn())
        .unwrap();
    assert!(pttl > 0, "the parent's key has {pttl} ms to live");
    guard.unlock().unwrap();
}

/// In a forked child, a guard's lease changes are told to the callback on
/// the child's own watchdog thread, after the parent used watchdogs before
/// the fork: a loss found by `extend` is told at once (its watchdog's job,
/// scheduled 10 s later, is started then by the child's own starter).
#[test]
fn a_forked_childs_lease_changes_are_told() {
    let server = Server::start();
    let parent = parent_locker(&server);
    let g = parent.lock(&key("fork-told-parent")).unwrap();
    wait_until("the parent's watchdog ran", Duration::from_secs(10), || {
        redmutex::watchdog_threads().running > 0
    });
    drop(g);
    drop(parent);
    wait_until("the pool's threads ended", Duration::from_secs(10), || {
        threads_named("r2d2") == 0
    });
    let (url, k) = (server.url(), key("fork-told-child"));
    let code = fork::in_child(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        let Ok(pool) = redmutex::pool(&url) else {
            return 10;
        };
        let Ok(locker) = Locker::builder(pool)
            .ttl(Duration::from_secs(30))
            .on_lease_change(move |c| {
                let _ = tx.send((c.from(), c.to()));
            })
            .build()
        else {
            return 11;
        };
        let Ok(guard) = locker.lock(&k) else {
            return 12;
        };
        let Ok(mut c) = redis::Client::open(url.as_str()).and_then(|c| c.get_connection()) else {
            return 13;
        };
        let _: Result<(), _> = redis::cmd("DEL").arg(&k).query(&mut c);
        if guard.extend(Duration::from_secs(30)).is_ok() {
            return 14;
        }
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok((redmutex::LeaseState::Held, redmutex::LeaseState::Lost)) => 0,
            Ok(_) => 15,
            Err(_) => 16,
        }
    });
    assert_eq!(code, Some(0), "the child's callback (16: never told)");
}
