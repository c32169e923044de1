//! The watchdog: it keeps short leases alive, stops on drop, and reports a
//! lease lost when the key is deleted, overwritten or taken, without ever
//! touching a key that is not ours.
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::time::{Duration, Instant};

use common::{key, keyspace_events, next_event, Server};
use redis::Commands;
use redmutex::Error;

const TTL: Duration = Duration::from_millis(400);
const LONG: Duration = Duration::from_secs(20);

#[test]
fn renewals_keep_a_short_lease_alive_for_many_ttls() {
    let server = Server::start();
    let k = key("renewed");
    let events = keyspace_events(&server, &k, "Kg");
    let locker = server.locker_with_ttl(TTL);
    let start = Instant::now();
    let g = locker.lock(&k).unwrap();
    // 24 renewals at TTL/3 span eight TTLs (over three seconds): the key
    // would be long gone without them.
    for _ in 0..24 {
        next_event(&events, "expire", LONG);
        g.ensure_held().unwrap();
    }
    assert!(start.elapsed() >= 7 * TTL, "{:?}", start.elapsed());
    let info = locker.holder(&k).unwrap().expect("still held");
    assert_eq!(info.fencing_token(), g.fencing_token());
    assert!(!g.is_lost());
    assert!(g.valid_until() > Instant::now());
    g.unlock().unwrap();
}

#[test]
fn without_watchdog_the_lease_expires_and_is_reported_lost() {
    let server = Server::start();
    let k = key("expires");
    let events = keyspace_events(&server, &k, "Kx");
    let locker = server.builder().ttl(TTL).watchdog(false).build().unwrap();
    let g = locker.lock(&k).unwrap();
    assert!(!g.is_lost());
    next_event(&events, "expired", LONG);
    // Redis expired it, so the local deadline (earlier by the drift) has passed.
    assert!(g.is_lost());
    assert!(matches!(g.ensure_held(), Err(Error::Lost { .. })));
    let other = server.locker().try_lock(&k).unwrap();
    assert!(other.is_some());
    assert!(matches!(g.unlock(), Err(Error::Lost { .. })));
    // Unlocking the lost guard left the new holder's key alone.
    assert!(server.locker().holder(&k).unwrap().is_some());
}

#[test]
fn a_deleted_key_is_reported_lost_and_not_recreated() {
    let server = Server::start();
    let k = key("deleted");
    let locker = server.locker_with_ttl(TTL);
    let g = locker.lock(&k).unwrap();
    let _: () = server.conn().del(&k).unwrap();
    assert!(g.wait_lost(LONG), "the watchdog must notice");
    assert!(matches!(g.ensure_held(), Err(Error::Lost { .. })));
    let exists: bool = server.conn().exists(&k).unwrap();
    assert!(!exists, "a lost lease must not recreate the key");
    assert!(matches!(g.unlock(), Err(Error::Lost { .. })));
}

#[test]
fn a_key_overwritten_with_another_type_is_left_alone() {
    let server = Server::start();
    let k = key("overwritten");
    let locker = server.locker_with_ttl(TTL);
    let g = locker.lock(&k).unwrap();
    let mut conn = server.conn();
    let _: () = conn.set(&k, "someone else's value").unwrap();
    assert!(g.wait_lost(LONG));
    // Not extended (no TTL was put on it) and not deleted.
    let ttl: i64 = conn.pttl(&k).unwrap();
    assert_eq!(ttl, -1);
    assert!(matches!(g.unlock(), Err(Error::Lost { .. })));
    let v: String = conn.get(&k).unwrap();
    assert_eq!(v, "someone else's value");
}

#[test]
fn a_key_taken_by_another_owner_is_neither_extended_nor_deleted() {
    let server = Server::start();
    let k = key("taken");
    let locker = server.locker_with_ttl(TTL);
    let g = locker.lock(&k).unwrap();
    let mut conn = server.conn();
    // Another owner's lock, as if our key had expired and been re-acquired.
    common::lock_as_someone_else(&server, &k, 60_000);
    assert!(g.wait_lost(LONG));
    let ttl: i64 = conn.pttl(&k).unwrap();
    assert!(ttl <= 60_000 && ttl > 0, "{ttl}");
    assert!(matches!(
        g.extend(Duration::from_secs(600)),
        Err(Error::Lost { .. })
    ));
    let ttl_after: i64 = conn.pttl(&k).unwrap();
    assert!(
        ttl_after <= ttl,
        "extended someone else's key: {ttl} -> {ttl_after}"
    );
    assert!(matches!(g.unlock(), Err(Error::Lost { .. })));
    assert_eq!(
        common::owner_of(&server, &k).as_deref(),
        Some(common::SOMEONE_ELSE)
    );
}

#[test]
fn extend_sets_the_ttl_and_moves_the_deadline() {
    let server = Server::start();
    let k = key("extend");
    let locker = server.builder().ttl(TTL).watchdog(false).build().unwrap();
    let g = locker.lock(&k).unwrap();
    let before = g.valid_until();
    g.extend(Duration::from_secs(60)).unwrap();
    assert!(g.valid_until() > before + Duration::from_secs(30));
    let ttl: i64 = server.conn().pttl(&k).unwrap();
    assert!(ttl > 30_000 && ttl <= 60_000, "{ttl}");
    assert!(matches!(
        g.extend(Duration::ZERO),
        Err(Error::InvalidInput(_))
    ));
    g.unlock().unwrap();
}

#[test]
fn extend_changes_the_ttl_the_watchdog_renews_with() {
    let server = Server::start();
    let k = key("extend-watchdog");
    let locker = server.locker_with_ttl(Duration::from_secs(60));
    let events = keyspace_events(&server, &k, "Kg");
    let g = locker.lock(&k).unwrap();
    // From a 60 s lease renewed every 20 s to a 300 ms one renewed every 100 ms.
    g.extend(Duration::from_millis(300)).unwrap();
    next_event(&events, "expire", LONG); // the extend itself
    for _ in 0..6 {
        next_event(&events, "expire", LONG);
    }
    let ttl: i64 = server.conn().pttl(&k).unwrap();
    assert!(ttl <= 300, "{ttl}");
    g.ensure_held().unwrap();
}
