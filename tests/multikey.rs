//! Multi-key locks: all or nothing, atomically.
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::sync::{Arc, Barrier};

use common::{key, Server};
use redis::Commands;
use redmutex::Error;

#[test]
fn all_keys_or_none() {
    let server = Server::start();
    let (a, b) = (server.locker(), server.locker());
    let (k1, k2, k3) = (key("m1"), key("m2"), key("m3"));
    let held = a.lock(&k2).unwrap();
    // k2 is busy: nothing is taken, k1 and k3 are not even created.
    assert!(b.try_lock_all(&[&k1, &k2, &k3]).unwrap().is_none());
    let mut conn = server.conn();
    let (e1, e3): (bool, bool) = (conn.exists(&k1).unwrap(), conn.exists(&k3).unwrap());
    assert!(!e1 && !e3, "a refused multi-key lock left keys behind");
    drop(held);
    let g = b
        .try_lock_all(&[&k1, &k2, &k3])
        .unwrap()
        .expect("all free now");
    assert_eq!(g.keys(), [k1.clone(), k2.clone(), k3.clone()]);
    for k in [&k1, &k2, &k3] {
        assert!(a.try_lock(k).unwrap().is_none(), "{k} must be held");
        assert_eq!(
            a.holder(k).unwrap().unwrap().fencing_token(),
            g.fencing_token()
        );
    }
    g.unlock().unwrap();
    for k in [&k1, &k2, &k3] {
        assert!(a.holder(k).unwrap().is_none(), "{k} must be released");
    }
}

#[test]
fn overlapping_sets_never_hold_a_partial_set() {
    // Threads lock {x, y} and {y, z} and single keys; a watcher checks that
    // x and z never appear held by a token that does not also hold y.
    let server = Server::start();
    let (x, y, z) = (key("x"), key("y"), key("z"));
    let barrier = Arc::new(Barrier::new(3));
    let mut threads = Vec::new();
    for set in [vec![x.clone(), y.clone()], vec![y.clone(), z.clone()]] {
        let locker = server.locker();
        let barrier = Arc::clone(&barrier);
        threads.push(std::thread::spawn(move || {
            barrier.wait();
            for _ in 0..50 {
                let refs: Vec<&str> = set.iter().map(String::as_str).collect();
                let g = locker.lock_all(&refs).unwrap();
                drop(g);
            }
        }));
    }
    let mut conn = server.conn();
    barrier.wait();
    while threads.iter().any(|t| !t.is_finished()) {
        // One MULTI: a consistent snapshot of the three owners.
        let (vx, vy, vz): (Option<String>, Option<String>, Option<String>) = redis::pipe()
            .atomic()
            .get(&x)
            .get(&y)
            .get(&z)
            .query(&mut conn)
            .unwrap();
        let owner = |v: &Option<String>| v.as_deref().map(common::owner_in).map(str::to_owned);
        let (ox, oy, oz) = (owner(&vx), owner(&vy), owner(&vz));
        for o in [&ox, &oz].into_iter().flatten() {
            assert_eq!(
                Some(o),
                oy.as_ref(),
                "partial hold: x={ox:?} y={oy:?} z={oz:?}"
            );
        }
    }
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_lost_key_in_a_multi_key_guard_releases_the_rest() {
    let server = Server::start();
    let locker = server.locker();
    let (k1, k2) = (key("part1"), key("part2"));
    let g = locker.lock_all(&[&k1, &k2]).unwrap();
    let _: () = server.conn().del(&k2).unwrap();
    assert!(matches!(g.unlock(), Err(Error::Lost { .. })));
    // The key still ours was released, not left to its TTL.
    assert!(locker.holder(&k1).unwrap().is_none());
}
