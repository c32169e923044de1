//! `Locker::holder`: who holds a key, with metadata, TTL and fencing token.

mod common;

use std::time::Duration;

use common::{key, Server};
use redis::Commands;

#[test]
fn free_key_has_no_holder() {
    let server = Server::start();
    assert!(server.locker().holder(&key("free")).unwrap().is_none());
}

#[test]
fn holder_reports_metadata_ttl_and_token() {
    let server = Server::start();
    let locker = server
        .builder()
        .metadata("report job on host-7")
        .ttl(Duration::from_secs(20))
        .build()
        .unwrap();
    let k = key("held");
    let g = locker.lock(&k).unwrap();
    let info = server.locker().holder(&k).unwrap().expect("held");
    assert_eq!(info.metadata(), "report job on host-7");
    assert_eq!(info.fencing_token(), g.fencing_token());
    assert!(info.ttl() > Duration::from_secs(10) && info.ttl() <= Duration::from_secs(20));
}

#[test]
fn default_metadata_names_the_process() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("default-meta");
    let _g = locker.lock(&k).unwrap();
    let info = locker.holder(&k).unwrap().unwrap();
    assert!(
        info.metadata()
            .ends_with(&format!(":{}", std::process::id())),
        "{}",
        info.metadata()
    );
}

#[test]
fn a_foreign_key_is_reported_as_held() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("foreign");
    let _: () = server.conn().set(&k, "not a lock").unwrap();
    let info = locker.holder(&k).unwrap().expect("the key blocks the lock");
    assert_eq!(info.metadata(), "");
    assert_eq!(info.fencing_token(), 0);
    assert_eq!(info.ttl(), Duration::MAX);
    assert!(locker.try_lock(&k).unwrap().is_none());
}

#[test]
fn prefixes_separate_lockers() {
    let server = Server::start();
    let a = server.builder().prefix("team-a").build().unwrap();
    let b = server.builder().prefix("team-b").build().unwrap();
    let k = key("deploy");
    let _ga = a.lock(&k).unwrap();
    assert!(
        b.try_lock(&k).unwrap().is_some(),
        "another prefix is another lock"
    );
    let exists: bool = server.conn().exists(format!("team-a:{k}")).unwrap();
    assert!(exists);
    assert!(a.holder(&k).unwrap().is_some());
}

#[test]
fn guard_debug_never_shows_the_owner_token() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("debug");
    let g = locker.lock(&k).unwrap();
    let owner = common::owner_of(&server, &k).unwrap();
    assert_eq!(owner.len(), 32, "a 128-bit token in hex");
    let shown = format!("{g:?} {locker:?}");
    assert!(!shown.contains(&owner), "{shown}");
    assert!(shown.contains(&g.fencing_token().to_string()));
}
