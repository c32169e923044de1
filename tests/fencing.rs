//! Fencing tokens: strictly increasing per key across lockers and multi-key
//! guards, one counter per prefix (not per lock name), and still increasing
//! after the server loses its data.
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::sync::{Arc, Barrier, Mutex};

use common::{key, Server};
use redis::Commands;

#[test]
fn tokens_increase_in_grant_order_across_lockers_and_multi_key_guards() {
    let server = Server::start();
    let k = key("fenced");
    let other = key("fenced-other");
    let order = Arc::new(Mutex::new(Vec::new()));
    let barrier = Arc::new(Barrier::new(4));
    let mut threads = Vec::new();
    for i in 0..4 {
        let locker = server.locker(); // each thread its own pool: separate "processes"
        let (k, other, order, barrier) = (
            k.clone(),
            other.clone(),
            Arc::clone(&order),
            Arc::clone(&barrier),
        );
        threads.push(std::thread::spawn(move || {
            barrier.wait();
            for round in 0..30 {
                let g = if (i + round) % 3 == 0 {
                    locker.lock_all(&[&other, &k]).unwrap()
                } else {
                    locker.lock(&k).unwrap()
                };
                // Recorded while holding the lock: the vector is in grant order.
                order.lock().unwrap().push(g.fencing_token());
                drop(g);
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let tokens = order.lock().unwrap();
    assert_eq!(tokens.len(), 120);
    for pair in tokens.windows(2) {
        assert!(pair[0] < pair[1], "tokens not increasing: {pair:?}");
    }
}

#[test]
fn one_counter_per_prefix_whatever_the_number_of_names() {
    let server = Server::start();
    let locker = server.builder().prefix("fence-test").build().unwrap();
    for i in 0..200 {
        let g = locker.lock(&format!("name-{i}")).unwrap();
        drop(g);
    }
    let keys: Vec<String> = server.conn().keys("*").unwrap();
    assert_eq!(keys, [common::fence_key(Some("fence-test"))]);
}

#[test]
fn tokens_keep_rising_after_the_data_is_flushed() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("flushed");
    let before = locker.lock(&k).unwrap().fencing_token();
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
    let after = locker.lock(&k).unwrap().fencing_token();
    assert!(after > before, "{before} then {after}");
}

#[test]
fn tokens_are_shown_by_holder() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("shown");
    let g = locker.lock(&k).unwrap();
    let info = locker.holder(&k).unwrap().unwrap();
    assert_eq!(info.fencing_token(), g.fencing_token());
    assert_eq!(common::fence_of(&server, &k), g.fencing_token());
}
