//! `?protocol=resp3`: a locker whose connections speak RESP3 (where a
//! subscription's confirmation and every announcement come as pushes, not
//! replies) wakes its waiters as one that speaks RESP2 does: on one server,
//! through Sentinel, and on a Cluster (where the sharded listener's own
//! connections speak RESP3 too).
#![allow(clippy::unwrap_used, clippy::disallowed_methods)] // tests fail loudly and spawn threads directly

mod common;

use std::time::{Duration, Instant};

use common::{key, wait_until, Cluster, Sentinels, Server};
use redis::sentinel::{
    LockedSentinelClient, SentinelClient, SentinelNodeConnectionInfo, SentinelServerType,
};
use redmutex::{Backoff, Locker};

/// A minute of TTL and of backoff: only a release's announcement gets a
/// waiter of a multi-key lock (which does not queue) the lock long before
/// its 30 s wait ends.
fn slow(pool: r2d2::Pool<impl r2d2::ManageConnection<Connection = redis::Connection>>) -> Locker {
    Locker::builder(pool)
        .ttl(Duration::from_secs(60))
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap()
}

/// Whether the pool's connections speak RESP3 (`CLIENT INFO` says `resp=3`),
/// so that a test of it cannot pass on RESP2.
fn speaks_resp3<M>(pool: &r2d2::Pool<M>) -> bool
where
    M: r2d2::ManageConnection<Connection = redis::Connection>,
{
    let mut conn = pool.get_timeout(Duration::from_secs(10)).unwrap();
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut *conn).unwrap();
    info.split_whitespace().any(|field| field == "resp=3")
}

/// `holder` holds two keys; `waiter` (another locker, as another process)
/// waits for both (a minute at most), and gets them once `holder` lets go:
/// long before its backoff or its wait could have let it try again.
/// `server` is the one they lock on: its release channel's subscriber, the
/// waiter's listener, shows that the listener started. (Counting the
/// waiter's attempts does not: the holder's renewals count too.)
fn woken_by_the_release(holder: &Locker, waiter: &Locker, server: &Server, name: &str) {
    let keys = vec![key(&format!("{name}-a")), key(&format!("{name}-b"))];
    let held = holder.lock_all(&keys).unwrap();
    let t = {
        let (waiter, keys) = (waiter.clone(), keys.clone());
        std::thread::spawn(move || {
            let got = waiter.lock_all_timeout(&keys, Duration::from_secs(60));
            (got, Instant::now())
        })
    };
    wait_until(
        "the waiter's listener subscribed",
        Duration::from_secs(20),
        || server.release_subscribers() >= 1,
    );
    let released = Instant::now();
    drop(held);
    let (got, at) = t.join().unwrap();
    let took = at.saturating_duration_since(released);
    assert!(got.is_ok(), "{got:?}");
    assert!(
        took < Duration::from_secs(15),
        "woken after {took:?}: by its backoff, not by the release"
    );
}

#[test]
fn a_resp3_waiter_is_woken_by_a_release_on_one_server() {
    let server = Server::start();
    let url = format!("{}?protocol=resp3", server.url());
    let (holder, waiter) = (
        slow(redmutex::pool(&url).unwrap()),
        slow(redmutex::pool(&url).unwrap()),
    );
    assert!(speaks_resp3(&redmutex::pool(&url).unwrap()));
    woken_by_the_release(&holder, &waiter, &server, "resp3-one");
    // And again, with the listener up from the start.
    woken_by_the_release(&holder, &waiter, &server, "resp3-again");
}

#[test]
fn a_resp3_waiter_is_woken_by_a_release_through_sentinel() {
    let master = Server::start();
    let _replica = Server::replica_of(&master);
    let sentinels = Sentinels::watch(&master);
    let pool = || {
        let resp3 = SentinelNodeConnectionInfo::default().set_redis_connection_info(
            redis::RedisConnectionInfo::default().set_protocol(redis::ProtocolVersion::RESP3),
        );
        let client = SentinelClient::build(
            sentinels.urls(),
            String::from("mymaster"),
            Some(resp3),
            SentinelServerType::Master,
        )
        .unwrap();
        r2d2::Pool::builder()
            .max_size(4)
            .test_on_check_out(false)
            .connection_customizer(Box::new(redmutex::SocketTimeouts::new(
                Duration::from_secs(2),
            )))
            .build(LockedSentinelClient::new(client))
            .unwrap()
    };
    assert!(speaks_resp3(&pool()));
    let (holder, waiter) = (slow(pool()), slow(pool()));
    woken_by_the_release(&holder, &waiter, &master, "resp3-sentinel");
}

#[test]
fn a_resp3_waiter_is_woken_by_a_release_on_a_cluster() {
    if redmutex_testkit::server_version().is_some_and(|v| v < (7, 0)) {
        return; // no sharded pub/sub: waiters poll (tests/cluster_wakeups.rs)
    }
    let cluster = Cluster::start();
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|u| format!("{u}?protocol=resp3"))
        .collect();
    let locker = || {
        Locker::builder(redmutex::cluster_pool(&urls).unwrap())
            .ttl(Duration::from_secs(60))
            .backoff(Backoff::fixed(Duration::from_secs(60)))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (locker(), locker());
    let tag = key("resp3-cluster");
    let keys = vec![format!("{{{tag}}}:a"), format!("{{{tag}}}:b")];
    let master = cluster.master_of(cluster.slot_of(&keys[0]));
    let held = holder.lock_all(&keys).unwrap();
    let t = {
        let (waiter, keys) = (waiter.clone(), keys.clone());
        std::thread::spawn(move || {
            let got = waiter.lock_all_timeout(&keys, Duration::from_secs(30));
            (got, Instant::now())
        })
    };
    // The listener's connection to the master speaks RESP3, as the pool's.
    wait_until(
        "the waiter's shard subscription, over RESP3",
        Duration::from_secs(20),
        || {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .arg("TYPE")
                .arg("pubsub")
                .query(&mut cluster.conn(master))
                .unwrap();
            clients
                .lines()
                .any(|c| c.split_whitespace().any(|f| f == "resp=3"))
        },
    );
    let released = Instant::now();
    drop(held);
    let (got, at) = t.join().unwrap();
    let took = at.saturating_duration_since(released);
    assert!(got.is_ok(), "{got:?}");
    assert!(
        took < Duration::from_secs(15),
        "woken after {took:?}: by its backoff, not by the release"
    );
}
