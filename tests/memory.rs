//! A Redis under memory pressure. With an evicting policy a lock key can be
//! evicted at any time: the library cannot prevent that, and reports the
//! lock lost at the holder's next renewal (the docs say to run locks on a
//! `noeviction` server). With `noeviction` and the memory full, nothing
//! hangs: Redis 7.0 lets the lock scripts write past `maxmemory` (scripts
//! without flags are not refused up front), so locks are still granted and
//! held leases renewed; a server that refuses them with OOM gives a typed
//! `Error::Redis` at once.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::time::Duration;

use common::{key, Server};

/// Writes 4 KiB values without a TTL, as keys `<name>:<i>`, until Redis
/// refuses (noeviction) or `rounds` have been written.
fn fill(server: &Server, name: &str, rounds: usize) -> bool {
    let mut c = server.conn();
    let junk = "x".repeat(4096);
    for i in 0..rounds {
        let r: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("{name}:{i}"))
            .arg(&junk)
            .query(&mut c);
        if r.is_err() {
            return true;
        }
    }
    false
}

#[test]
fn an_evicted_lock_is_reported_lost_at_the_next_renewal() {
    // volatile-ttl evicts the keys with a TTL first: the locks.
    let server = Server::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "volatile-ttl"]);
    let ttl = Duration::from_secs(3);
    let locker = server.locker_with_ttl(ttl);
    let guard = locker.lock(&key("evicted")).unwrap();
    fill(&server, "junk", 4000);
    assert!(
        locker.holder(&key("evicted")).unwrap().is_none(),
        "the lock was not evicted: the test proves nothing"
    );
    // The next renewal (a third of the TTL) finds it gone.
    assert!(
        guard.wait_lost(ttl),
        "an evicted lock was not reported lost"
    );
}

#[test]
fn a_lock_evicted_by_allkeys_lru_is_reported_lost_at_the_next_renewal() {
    // allkeys-lru evicts the keys used longest ago (to the second). A
    // renewal uses the key, so the TTL is long here: with renewals ten
    // seconds apart, the lock is soon older than the junk written after it.
    let server = Server::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru"]);
    let ttl = Duration::from_secs(30);
    let locker = server.locker_with_ttl(ttl);
    let k = key("lru");
    let guard = locker.lock(&k).unwrap();
    let mut c = server.conn();
    // EXISTS does not count as a use of the key.
    let there = |c: &mut redis::Connection| redis::cmd("EXISTS").arg(&k).query::<bool>(c).unwrap();
    let mut rounds = 0;
    while there(&mut c) {
        rounds += 1;
        assert!(
            rounds <= 100,
            "the lock was not evicted: the test proves nothing"
        );
        fill(&server, &format!("young:{rounds}"), 100);
    }
    assert!(
        guard.wait_lost(ttl),
        "an evicted lock was not reported lost"
    );
}

#[test]
fn a_full_noeviction_server_neither_hangs_nor_loses_held_leases() {
    let server = Server::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]);
    let ttl = Duration::from_secs(2);
    let locker = server.locker_with_ttl(ttl);
    let guard = locker.lock(&key("held")).unwrap();
    assert!(
        fill(&server, "junk", 100_000),
        "Redis never refused a write"
    );
    let (r, took) = common::timed(|| locker.try_lock(&key("new")));
    let refused = |e: &redmutex::Error| format!("{e:?}").contains("OOM");
    assert!(
        matches!(&r, Ok(Some(_))) || r.as_ref().is_err_and(refused),
        "{r:?}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(r);
    // Renewal only extends the key: allowed on a full server.
    assert!(
        !guard.wait_lost(ttl * 2),
        "a held lease was lost on a full server"
    );
    guard.unlock().unwrap();
}
