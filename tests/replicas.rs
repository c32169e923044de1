//! `min_replicas`: WAIT on the acquiring connection; too few acknowledgements
//! fail the acquisition cleanly and leave no key.

mod common;

use std::time::Duration;

use common::{key, Server};
use redis::Commands;
use redmutex::Error;

#[test]
fn an_acknowledged_acquisition_succeeds() {
    let master = Server::start();
    let _replica = Server::replica_of(&master);
    // The replica's acknowledgement may take a while on a loaded machine
    // (the default wait for it is 250 ms): what is shown here is that one
    // that comes is enough, not how soon.
    let locker = master
        .builder()
        .min_replicas(1)
        .io_timeout(Duration::from_secs(10))
        .replica_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let k = key("acked");
    let g = locker.lock(&k).unwrap();
    g.unlock().unwrap();
}

#[test]
fn a_stalled_replica_fails_the_acquisition_and_leaves_no_key() {
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let locker = master
        .builder()
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let k = key("unacked");
    replica.pause(); // it can no longer acknowledge anything
    let r = locker.try_lock(&k);
    replica.resume();
    match r {
        Err(Error::NotReplicated { acked, needed }) => {
            assert_eq!((acked, needed), (0, 1));
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let exists: bool = master.conn().exists(&k).unwrap();
    assert!(!exists, "the unacknowledged lock must be released");
    // Once the replica is back, it works.
    assert!(locker.try_lock(&k).unwrap().is_some());
}

#[test]
fn more_replicas_than_exist_cannot_be_acknowledged() {
    let master = Server::start();
    let locker = master
        .builder()
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    assert!(matches!(
        locker.try_lock(&key("alone")),
        Err(Error::NotReplicated {
            acked: 0,
            needed: 1
        })
    ));
    let n: i64 = redis::cmd("DBSIZE").query(&mut master.conn()).unwrap();
    assert!(
        n <= 1,
        "only the fencing counter may remain, found {n} keys"
    );
}

#[test]
fn replica_timeout_must_fit_in_the_io_timeout() {
    let master = Server::start();
    let r = master
        .builder()
        .min_replicas(1)
        .replica_timeout(Duration::from_secs(5))
        .build();
    assert!(matches!(r, Err(Error::InvalidInput(_))), "{r:?}");
}

/// A lease with `min_replicas` counts only what the replicas have: a
/// renewal the replica does not acknowledge does not extend it, so that a
/// failover to that replica cannot find the lock gone (expired there) while
/// its holder still believes it holds it.
#[test]
fn renewals_the_replica_misses_do_not_extend_the_lease() {
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let ttl = Duration::from_millis(600);
    let locker = master
        .builder()
        .ttl(ttl)
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    // The grant needs the replica's acknowledgement within 100 ms, which a
    // loaded machine may miss (a precondition: tried again, a few times).
    let k = key("renewed");
    let g = (0..20)
        .find_map(|_| match locker.lock(&k) {
            Err(Error::NotReplicated { .. }) => None,
            other => Some(other.unwrap()),
        })
        .expect("no acknowledged grant in 20 tries");
    replica.pause(); // from now on the replica's copy is not renewed
    let lost = g.wait_lost(ttl * 3);
    replica.resume();
    assert!(
        lost,
        "renewals the replica never acknowledged kept the lease for {:?}, past the TTL of its copy",
        ttl * 3
    );
}

/// A managed service that offers no `WAIT` (here: an ACL that denies it):
/// `min_replicas` fails with a typed error that says so, and leaves no key.
#[test]
fn a_server_that_refuses_wait_fails_min_replicas_with_a_typed_error() {
    let server = Server::start();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-wait")
        .query(&mut server.conn())
        .unwrap();
    let locker = server.builder().min_replicas(1).build().unwrap();
    let k = key("no-wait");
    match locker.try_lock(&k) {
        Err(Error::Unsupported { reason }) => {
            assert!(reason.contains("WAIT"), "{reason}");
            assert!(reason.contains("min_replicas"), "{reason}");
        }
        other => panic!("expected Error::Unsupported, got {other:?}"),
    }
    let key_left: bool = server.conn().exists(&k).unwrap();
    assert!(
        !key_left,
        "the lock taken before the refused WAIT is released"
    );
}
