//! The constructors next to `Locker::open`: Sentinel and Cluster from
//! their URLs, with the settings of `redmutex::pool`.

mod common;

use std::time::Duration;

use common::{key, timed, Cluster, Sentinels, Server};
use redmutex::Locker;
use redmutex_testkit::proxy::{Mode, Proxy};

#[test]
fn open_sentinel_locks_on_the_master_the_sentinels_name() {
    let master = Server::start();
    let _replica = Server::replica_of(&master);
    let sentinels = Sentinels::watch(&master);
    let locker = Locker::open_sentinel(sentinels.urls(), "mymaster").unwrap();
    let k = key("open-sentinel");
    let guard = locker.lock(&k).unwrap();
    let on_master: bool = redis::cmd("EXISTS")
        .arg(&k)
        .query(&mut master.conn())
        .unwrap();
    assert!(on_master);
    guard.unlock().unwrap();
}

#[test]
fn open_cluster_locks_on_the_shard_of_the_key() {
    let cluster = Cluster::start();
    let locker = Locker::open_cluster(cluster.urls()).unwrap();
    let guard = locker
        .lock_all(["{open-cluster}:a", "{open-cluster}:b"])
        .unwrap();
    let keys = cluster.all_keys();
    assert!(keys.contains(&"{open-cluster}:a".to_owned()), "{keys:?}");
    guard.unlock().unwrap();
}

#[test]
fn sentinel_and_cluster_pools_need_a_url() {
    let none: [&str; 0] = [];
    assert!(matches!(
        redmutex::cluster_pool(none),
        Err(redmutex::Error::InvalidUrl { .. })
    ));
    assert!(matches!(
        redmutex::sentinel_pool(["http://127.0.0.1:26379/"], "mymaster"),
        Err(redmutex::Error::InvalidUrl { .. })
    ));
}

#[test]
fn open_returns_within_the_io_timeout_from_a_server_that_never_answers() {
    // `Locker::open` connects once to check the server and the password;
    // a server that accepts connections and then says nothing, or answers
    // slowly, must not hold it past the documented bound (the I/O
    // timeout), which the handshake and the PING share. One that says
    // nothing is unreachable (timed out); a slow one that answered the
    // handshake opens.
    let server = Server::start();
    let bound = redmutex::DEFAULT_IO_TIMEOUT + Duration::from_secs(1);
    let silent = Proxy::start(server.port());
    silent.set(Mode::Blackhole);
    let (opened, took) = timed(|| Locker::open(&silent.url()));
    assert!(
        opened
            .as_ref()
            .is_err_and(|e| e.is_connection() && e.to_string().contains("timed out")),
        "{opened:?}"
    );
    assert!(took < bound, "silent server: {took:?}");
    // Each way 0.8 s: the handshake (1.6 s) fits in the I/O timeout, the
    // PING after it must get only what is left.
    let slow = Proxy::with_delay(server.port(), Duration::from_millis(800));
    let (opened, took) = timed(|| Locker::open(&slow.url()));
    assert!(opened.is_ok(), "{opened:?}");
    assert!(took < bound, "slow server: {took:?}");
}
