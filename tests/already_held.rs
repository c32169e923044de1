//! A thread that would wait on itself is told: every call that takes a
//! hold returns `Error::AlreadyHeld` at once, with no round trip, when the
//! calling thread already holds what it asks for through the same locker
//! (or a clone); other threads, other lockers and what a thread could
//! still get are not refused.
#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use common::{key, Server};
use redmutex::{Error, Guard};

const WAIT: Duration = Duration::from_secs(30);

/// `call` is refused with `AlreadyHeld { key: want }` and sends nothing.
fn refused<T: std::fmt::Debug>(
    server: &Server,
    want: &str,
    call: impl FnOnce() -> Result<T, Error>,
) {
    let before = server.evalsha_calls();
    match call() {
        Err(Error::AlreadyHeld { key }) => assert_eq!(key, want),
        other => panic!("expected AlreadyHeld {{ {want:?} }}, got {other:?}"),
    }
    assert_eq!(server.evalsha_calls(), before, "a round trip for {want:?}");
}

#[test]
fn a_lock_the_thread_holds_is_refused_by_every_call() {
    let server = Server::start();
    let locker = server.locker();
    let clone = locker.clone();
    let (k, other) = (key("held"), key("other"));
    let stop = AtomicBool::new(false);
    let guard = locker.lock(&k).unwrap();
    refused(&server, &k, || locker.lock(&k));
    refused(&server, &k, || clone.lock(&k));
    refused(&server, &k, || locker.lock_timeout(&k, WAIT));
    refused(&server, &k, || locker.lock_or_stop(&k, None, &stop));
    refused(&server, &k, || locker.try_lock(&k));
    refused(&server, &k, || locker.lock_all([&other, &k]));
    refused(&server, &k, || locker.lock_all_timeout([&other, &k], WAIT));
    refused(&server, &k, || locker.try_lock_all([&other, &k]));
    // Nothing was taken on the way: the other key is free.
    locker.lock(&other).unwrap().unlock().unwrap();
    guard.unlock().unwrap();
    // Released: the thread takes it again.
    locker.lock(&k).unwrap().unlock().unwrap();

    // A multi-key lock counts for each of its keys.
    let both = locker.lock_all([&k, &other]).unwrap();
    refused(&server, &other, || locker.lock(&other));
    refused(&server, &other, || locker.try_lock(&other));
    both.unlock().unwrap();
}

#[test]
fn another_thread_or_another_locker_waits_as_before() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("shared");
    let guard = locker.lock(&k).unwrap();
    // Another thread of the same locker: busy, not refused.
    let (l, k2) = (locker.clone(), k.clone());
    let there = std::thread::spawn(move || {
        let busy = l.try_lock(&k2).map(|g| g.is_none());
        let timed_out = l.lock_timeout(&k2, Duration::from_millis(50));
        (busy, timed_out.map(drop))
    })
    .join()
    .unwrap();
    assert!(matches!(there.0, Ok(true)), "{:?}", there.0);
    assert!(
        matches!(there.1, Err(Error::Timeout { .. })),
        "{:?}",
        there.1
    );
    // Another locker on this thread (as another process would be): busy.
    let separate = server.locker();
    assert!(separate.try_lock(&k).unwrap().is_none());
    guard.unlock().unwrap();
}

#[test]
fn a_guard_moved_to_another_thread_counts_for_the_thread_that_took_it() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("moved");
    let guard = locker.lock(&k).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (busy_tx, busy_rx) = std::sync::mpsc::channel();
    let (l, k2) = (locker.clone(), k.clone());
    let holder = std::thread::spawn(move || {
        // The thread the guard went to may wait for it (it did not take it).
        busy_tx.send(l.try_lock(&k2).map(|g| g.is_none())).unwrap();
        rx.recv().unwrap();
        drop(guard);
    });
    assert!(matches!(busy_rx.recv().unwrap(), Ok(true)));
    refused(&server, &k, || locker.try_lock(&k));
    tx.send(()).unwrap();
    holder.join().unwrap();
    // Its hold ended over there: free for this thread again.
    locker.lock(&k).unwrap().unlock().unwrap();
}

#[test]
fn a_semaphore_refuses_only_a_permit_beyond_all_it_has() {
    let server = Server::start();
    let locker = server.locker();
    let name = key("sem");
    let sem = locker.semaphore(&name, 2).unwrap();
    let first = sem.acquire().unwrap();
    // One more is there to be had.
    let second = sem.try_acquire().unwrap().unwrap();
    refused(&server, &name, || sem.acquire());
    refused(&server, &name, || sem.acquire_timeout(WAIT));
    refused(&server, &name, || sem.try_acquire());
    drop(second);
    let again = sem.acquire().unwrap();
    drop((first, again));
}

#[test]
fn a_read_write_lock_refuses_a_write_under_any_hold_and_a_read_under_the_write() {
    let server = Server::start();
    let locker = server.locker();
    let name = key("rw");
    let rw = locker.rwlock(&name).unwrap();
    let stop = AtomicBool::new(false);
    let write = rw.write().unwrap();
    refused(&server, &name, || rw.write());
    refused(&server, &name, || rw.write_timeout(WAIT));
    refused(&server, &name, || rw.write_or_stop(None, &stop));
    refused(&server, &name, || rw.try_write());
    refused(&server, &name, || rw.read());
    refused(&server, &name, || rw.read_timeout(WAIT));
    refused(&server, &name, || rw.read_or_stop(None, &stop));
    refused(&server, &name, || rw.try_read());
    // Downgraded: a read hold now, which another read may share.
    let read = write.downgrade().unwrap();
    refused(&server, &name, || rw.write());
    refused(&server, &name, || rw.try_write());
    let second: Guard = rw.try_read().unwrap().unwrap();
    drop((read, second));
    rw.write().unwrap().unlock().unwrap();
}

#[test]
fn a_leader_campaigning_again_is_refused() {
    let server = Server::start();
    let locker = server.locker();
    let name = key("boss");
    let election = locker.election(&name).unwrap();
    let leadership = election.campaign("a").unwrap();
    refused(&server, &name, || election.campaign("a"));
    refused(&server, &name, || election.try_campaign("b"));
    leadership.resign().unwrap();
}

#[test]
fn a_guard_whose_lease_is_lost_no_longer_counts() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("lost");
    let guard = locker.lock(&k).unwrap();
    let _: () = redis::cmd("DEL").arg(&k).query(&mut server.conn()).unwrap();
    // Not known lost yet: it still counts.
    refused(&server, &k, || locker.try_lock(&k));
    assert!(matches!(
        guard.extend(Duration::from_secs(30)),
        Err(Error::Lost { .. })
    ));
    // Known lost: whoever holds the key now, not this thread.
    let next = locker.lock(&k).unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
    drop((guard, next));
}
