//! `Locker::holder`: who holds a key, with metadata, TTL and fencing token.
#![allow(clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::time::Duration;

use common::{key, Cluster, Server};
use redis::Commands;

/// Sets `key` to `value` for a minute (`PX`).
fn set_for_a_minute(c: &mut redis::Connection, key: &str, value: &[u8]) {
    let minute = redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(60_000));
    let _: () = c.set_options(key, value, minute).unwrap();
}

/// `answer` is a refusal with `InvalidInput` (a key that is no hold).
fn refused<T: std::fmt::Debug>(answer: &Result<T, redmutex::Error>, what: &str) {
    assert!(
        matches!(answer, Err(redmutex::Error::InvalidInput(_))),
        "{what}: {answer:?}"
    );
}
use redmutex::Locker;

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
fn a_key_redmutex_did_not_write_is_no_hold() {
    // An application's key under a lock's name (`SET user:1 alice`, with or
    // without an expiry), or a value that looks like a lock's but has no
    // expiry (redmutex never writes one), is no hold: `holder` says so
    // (`InvalidInput`), as `break_lock` does, and `locks()` never lists it.
    // Before, `holder` answered a hold with metadata "", token 0 and a TTL
    // of `Duration::MAX`, which `redmutex holder` printed as
    // 18446744073709551615999 ms left.
    let server = Server::start();
    let prefix = key("foreign");
    let locker = server.builder().prefix(&prefix).build().unwrap();
    let mut c = server.conn();
    let lookalike = format!("{}:17:someone", "ab".repeat(16));
    let keys: [(&str, &str, Option<u64>); 3] = [
        ("user:1", "alice", None),
        ("user:2", "bob", Some(60_000)),
        ("stale", lookalike.as_str(), None),
    ];
    for (name, value, px) in keys {
        let mut set = redis::cmd("SET");
        set.arg(format!("{prefix}:{name}")).arg(value);
        if let Some(px) = px {
            set.arg("PX").arg(px);
        }
        set.exec(&mut c).unwrap();
        let answer = locker.holder(name);
        refused(&answer, name);
        let broken = locker.break_lock(name, "not a lock");
        refused(&broken, name);
        let kept: Option<String> = c.get(format!("{prefix}:{name}")).unwrap();
        assert_eq!(kept.as_deref(), Some(value), "{name} was touched");
        // It blocks the lock all the same.
        assert!(locker.try_lock(name).unwrap().is_none());
    }
    let listed = locker.locks().unwrap();
    assert!(listed.is_empty(), "{listed:?}");
}

#[test]
fn a_lock_like_value_with_a_token_redmutex_never_mints_is_no_hold() {
    // A value that looks like a lock's, with an expiry, but a fencing token
    // no grant can have (the counter's INCR stops at 2^63 - 1, tokens have
    // no sign and no leading zero, and start at 1): `break_lock` leaves it
    // alone as a key redmutex did not write, so `holder` must say the same
    // and `locks()` must not list it. Before, both took it for a hold, with
    // the token read loosely (`05` as 5, `+5` as 5, 2^63 and above as they
    // are), that `break_lock` then refused.
    let server = Server::start();
    let prefix = key("lookalike");
    let locker = server.builder().prefix(&prefix).build().unwrap();
    let mut c = server.conn();
    let owner = "ab".repeat(16);
    for (i, fence) in [
        "05",
        "+5",
        "0",
        "9223372036854775808",
        "18446744073709551615",
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("look-{i}");
        let value = format!("{owner}:{fence}:someone");
        set_for_a_minute(&mut c, &format!("{prefix}:{name}"), value.as_bytes());
        let answer = locker.holder(&name);
        refused(&answer, fence);
        let broken = locker.break_lock(&name, "not a lock");
        refused(&broken, fence);
    }
    let listed = locker.locks().unwrap();
    assert!(listed.is_empty(), "{listed:?}");
}

#[test]
fn a_binary_value_is_no_hold_and_no_listing_fails_for_it() {
    // An application's binary value under the prefix (not UTF-8) is a key
    // redmutex did not write: `holder` refuses it with `InvalidInput`, and
    // `locks()` lists the holds beside it. Before, reading it failed with
    // "unexpected script reply", and so did the whole listing: on one
    // server for a lock-like value with binary metadata, on a Cluster
    // (where every string key of the prefix is read) for any binary value.
    let server = Server::start();
    let prefix = key("binary");
    let locker = server.builder().prefix(&prefix).build().unwrap();
    let held = locker.lock("real").unwrap();
    let mut c = server.conn();
    let _: () = c
        .set(format!("{prefix}:blob"), &b"\xff\xfe\x00"[..])
        .unwrap();
    let mut lookalike = format!("{}:5:", "ab".repeat(16)).into_bytes();
    lookalike.push(0xff);
    set_for_a_minute(&mut c, &format!("{prefix}:lookalike"), &lookalike);
    let answer = locker.holder("blob");
    refused(&answer, "blob");
    let listed = common::listed_keys(&locker);
    assert!(listed.contains(&"real".to_owned()), "{listed:?}");
    drop(held);

    let cluster = Cluster::start();
    let locker = Locker::builder(cluster.pool())
        .prefix(&prefix)
        .build()
        .unwrap();
    let held = locker.lock("real").unwrap();
    let mut c = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = c
        .set(format!("{prefix}:blob"), &b"\xff\xfe\x00"[..])
        .unwrap();
    let answer = locker.holder("blob");
    refused(&answer, "blob");
    assert_eq!(common::listed_keys(&locker), ["real"]);
    drop(held);
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
