//! A guard that is never dropped (`std::mem::forget`, a leak, a reference
//! cycle) keeps its watchdog renewing for as long as the process lives;
//! `Builder::max_hold` bounds even that, for every kind of guard: a lock,
//! a lock on several keys, a permit, a read and the write hold, a
//! leadership (the `Guard` docs' "Resource leaking", issue 42 item 13).
#![allow(clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::time::Duration;

use common::{key, next_event, wait_until, Server};
use redmutex::Locker;

const TTL: Duration = Duration::from_millis(600);
const MAX_HOLD: Duration = Duration::from_secs(1);
/// Generous: the forgotten guard's key is gone by `MAX_HOLD + TTL`.
const GONE_WITHIN: Duration = Duration::from_secs(20);

fn bounded(server: &Server) -> Locker {
    server
        .builder()
        .ttl(TTL)
        .max_hold(MAX_HOLD)
        .build()
        .unwrap()
}

#[test]
fn a_forgotten_guard_is_renewed_as_long_as_the_process_lives() {
    let server = Server::start();
    let locker = server.builder().ttl(TTL).build().unwrap();
    let k = key("forgotten-renewed");
    let renewals = common::keyspace_events(&server, &k, "Kg");
    std::mem::forget(locker.lock(&k).unwrap());
    // Five renewals: well past a TTL, the key is still there.
    for _ in 0..5 {
        next_event(&renewals, "expire", Duration::from_secs(20));
    }
    assert!(
        server.locker().try_lock(&k).unwrap().is_none(),
        "a forgotten guard's lock was free"
    );
}

#[test]
fn max_hold_frees_a_forgotten_lock() {
    let server = Server::start();
    let (k, a, b) = (
        key("forgotten-lock"),
        key("forgotten-a"),
        key("forgotten-b"),
    );
    std::mem::forget(bounded(&server).lock(&k).unwrap());
    std::mem::forget(bounded(&server).lock_all([&a, &b]).unwrap());
    let other = server.locker();
    wait_until("the forgotten lock free", GONE_WITHIN, || {
        other.try_lock(&k).unwrap().is_some()
    });
    wait_until("the forgotten keys free", GONE_WITHIN, || {
        other.try_lock_all([&a, &b]).unwrap().is_some()
    });
}

#[test]
fn max_hold_frees_a_forgotten_permit_and_holds() {
    let server = Server::start();
    let locker = bounded(&server);
    let other = server.locker();
    let name = key("forgotten-permit");
    std::mem::forget(locker.semaphore(&name, 1).unwrap().acquire().unwrap());
    wait_until("the forgotten permit free", GONE_WITHIN, || {
        let permits = other.semaphore(&name, 1).unwrap();
        permits.try_acquire().unwrap().is_some()
    });
    let name = key("forgotten-rw");
    std::mem::forget(locker.rwlock(&name).unwrap().read().unwrap());
    wait_until("the forgotten read hold gone", GONE_WITHIN, || {
        other.rwlock(&name).unwrap().try_write().unwrap().is_some()
    });
    std::mem::forget(locker.rwlock(&name).unwrap().write().unwrap());
    wait_until("the forgotten write hold gone", GONE_WITHIN, || {
        other.rwlock(&name).unwrap().try_read().unwrap().is_some()
    });
}

#[test]
fn max_hold_replaces_a_forgotten_leader() {
    let server = Server::start();
    let name = key("forgotten-leader");
    let leader = bounded(&server)
        .election(&name)
        .unwrap()
        .campaign("forgotten")
        .unwrap();
    std::mem::forget(leader);
    let election = server.locker().election(&name).unwrap();
    wait_until("the forgotten leader replaced", GONE_WITHIN, || {
        election.try_campaign("next").unwrap().is_some()
    });
}
