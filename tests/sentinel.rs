//! Sentinel: 1 master, 1 replica, 3 sentinels. Lock, kill the master, and
//! lock again once the replica is promoted; the gap is printed.

mod common;

use std::time::{Duration, Instant};

use common::{key, Sentinels, Server};
use redis::sentinel::{LockedSentinelClient, SentinelClient, SentinelServerType};
use redmutex::{Locker, SocketTimeouts};

#[test]
fn locks_work_again_after_a_failover() {
    let mut master = Server::start();
    let replica = Server::replica_of(&master);
    let sentinels = Sentinels::watch(&master);
    // A `String`: redis-rs takes one without its TLS feature, and any
    // `AsRef<str>` with it.
    let service = String::from("mymaster");
    let client =
        SentinelClient::build(sentinels.urls(), service, None, SentinelServerType::Master).unwrap();
    let pool = r2d2::Pool::builder()
        .max_size(4)
        .test_on_check_out(false)
        .connection_customizer(Box::new(SocketTimeouts::new(Duration::from_millis(500))))
        .build(LockedSentinelClient::new(client))
        .unwrap();
    let locker = Locker::builder(pool)
        .io_timeout(Duration::from_millis(500))
        .checkout_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let before = locker.lock(&key("before")).unwrap();
    let before_token = before.fencing_token();
    drop(before);

    // Watch for the promotion on a sentinel's event channel.
    let mut events = redis::Client::open(sentinels.urls()[0].as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut pubsub = events.as_pubsub();
    pubsub.subscribe("+switch-master").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();

    let killed = Instant::now();
    master.kill();
    let msg = pubsub
        .get_message()
        .expect("a +switch-master event within 60 s");
    let payload: String = msg.get_payload().unwrap();
    assert!(
        payload.ends_with(&format!("127.0.0.1 {}", replica.port())),
        "promoted: {payload}"
    );
    let promoted = killed.elapsed();

    // Each attempt is bounded; connections to the dead master are discarded.
    let k = key("after");
    let mut attempts = 0;
    let guard = loop {
        attempts += 1;
        match locker.try_lock(&k) {
            Ok(Some(g)) => break g,
            Ok(None) => panic!("nobody else holds {k}"),
            Err(e) => assert!(
                attempts < 100,
                "still failing after {attempts} attempts: {e}"
            ),
        }
    };
    let gap = killed.elapsed();
    eprintln!(
        "sentinel failover: promotion {promoted:?} after the kill, first lock {gap:?} after it \
         ({attempts} attempts)"
    );
    // The new master continues the fencing counter it replicated.
    assert!(guard.fencing_token() > before_token);
    guard.unlock().unwrap();

    // The other primitives run on the promoted master too.
    let sem = locker.semaphore(&key("sem"), 2).unwrap();
    let permit = sem.acquire().unwrap();
    let rw = locker.rwlock(&key("rw")).unwrap();
    let read = rw.read().unwrap();
    assert!(common::elsewhere(|| rw.try_write().unwrap().is_none()));
    assert!(read.fencing_token() > permit.fencing_token());
    drop((permit, read));
    let write = rw.write().unwrap();
    assert!(write.fencing_token() > before_token);
}
