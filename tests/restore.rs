//! Fencing tokens keep rising when the server comes back with older data:
//! a restart from an RDB snapshot taken before the last grants, from an AOF
//! written once a second, or with no persistence at all.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use common::{key, Server};

/// Locks `k` `n` times and returns the largest token handed out.
fn grant_many(locker: &redmutex::Locker, k: &str, n: usize) -> u64 {
    let mut last = 0;
    for _ in 0..n {
        let g = locker.lock(k).unwrap();
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        g.unlock().unwrap();
    }
    last
}

#[test]
fn tokens_rise_after_a_restart_from_an_older_snapshot() {
    let mut server = Server::start();
    let k = key("restored");
    let before_snapshot = grant_many(&server.locker(), &k, 50);
    server.save();
    // Grants the snapshot does not know of.
    let highest = grant_many(&server.locker(), &k, 50);
    assert!(highest > before_snapshot);
    server.restart();
    let after = server.locker().lock(&k).unwrap().fencing_token();
    assert!(
        after > highest,
        "token {after} after the restart, but {highest} was handed out before it"
    );
}

#[test]
fn tokens_rise_after_a_restart_from_an_aof_written_every_second() {
    let mut server = Server::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let k = key("aof");
    let highest = grant_many(&server.locker(), &k, 200);
    server.restart();
    let after = server.locker().lock(&k).unwrap().fencing_token();
    assert!(after > highest, "{highest} then {after}");
}

#[test]
fn tokens_rise_after_a_restart_without_persistence() {
    let mut server = Server::start();
    let k = key("volatile");
    let highest = grant_many(&server.locker(), &k, 20);
    server.restart();
    let after = server.locker().lock(&k).unwrap().fencing_token();
    assert!(after > highest, "{highest} then {after}");
}

#[test]
fn tokens_of_a_prefix_rise_after_a_restore_whatever_the_name() {
    // One counter serves every name of a prefix: a restore must not let a
    // name locked for the first time since get a token already used.
    let mut server = Server::start();
    let locker = server.builder().prefix("restore").build().unwrap();
    grant_many(&locker, "a", 10);
    server.save();
    let highest = grant_many(&locker, "b", 30);
    server.restart();
    let locker = server.builder().prefix("restore").build().unwrap();
    let after = locker.lock("c").unwrap().fencing_token();
    assert!(after > highest, "{highest} then {after}");
}
