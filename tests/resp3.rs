//! `?protocol=resp3`: a locker whose connections speak RESP3 (where a
//! subscription's confirmation and every announcement come as pushes, not
//! replies) wakes its waiters as one that speaks RESP2 does: on one server,
//! through Sentinel, and on a Cluster (where the sharded listener's own
//! connections speak RESP3 too).
#![allow(clippy::unwrap_used, clippy::disallowed_methods)] // tests fail loudly and spawn threads directly

mod common;

use std::time::Duration;

use common::{key, slow_locker_over, woken_by_the_announcement, Cluster, Sentinels, Server};
use redis::sentinel::{
    LockedSentinelClient, SentinelClient, SentinelNodeConnectionInfo, SentinelServerType,
};
use redmutex::Locker;

/// Whether the pool's connections speak RESP3, so that a test of it cannot
/// pass on RESP2: `CONFIG GET` replies with a map in RESP3, a flat array in
/// RESP2 (`CLIENT INFO`'s `resp=` field would say it too, but only from
/// Redis 7.0 on).
fn speaks_resp3<M>(pool: &r2d2::Pool<M>) -> bool
where
    M: r2d2::ManageConnection<Connection = redis::Connection>,
{
    let mut conn = pool.get_timeout(Duration::from_secs(10)).unwrap();
    let reply: redis::Value = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(&mut *conn)
        .unwrap();
    matches!(reply, redis::Value::Map(_))
}

/// `holder` holds two keys; `waiter` (another locker, as another process)
/// waits for both, and gets them once `holder` lets go, woken by the
/// release (see [`woken_by_the_announcement`]). `server` is the one they
/// lock on: its release channel's subscriber, the waiter's listener, shows
/// that the listener started. (Counting the waiter's attempts does not:
/// the holder's renewals count too.)
fn woken_by_the_release(holder: &Locker, waiter: &Locker, server: &Server, name: &str) {
    let keys = vec![key(&format!("{name}-a")), key(&format!("{name}-b"))];
    let held = holder.lock_all(&keys).unwrap();
    let what = "the waiter's listener subscribed";
    let subscribed = &mut || server.release_subscribers() >= 1;
    let got = woken_by_the_announcement(held, waiter, &keys, (what, subscribed));
    got.unlock().unwrap();
}

#[test]
fn a_resp3_waiter_is_woken_by_a_release_on_one_server() {
    let server = Server::start();
    let url = format!("{}?protocol=resp3", server.url());
    let (holder, waiter) = (
        slow_locker_over(redmutex::pool(&url).unwrap()),
        slow_locker_over(redmutex::pool(&url).unwrap()),
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
    let (holder, waiter) = (slow_locker_over(pool()), slow_locker_over(pool()));
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
    let locker = || slow_locker_over(redmutex::cluster_pool(&urls).unwrap());
    let (holder, waiter) = (locker(), locker());
    let tag = key("resp3-cluster");
    let keys = vec![format!("{{{tag}}}:a"), format!("{{{tag}}}:b")];
    let master = cluster.master_of(cluster.slot_of(&keys[0]));
    let held = holder.lock_all(&keys).unwrap();
    // The listener's connection to the master speaks RESP3, as the pool's.
    let over_resp3 = &mut || {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut cluster.conn(master))
            .unwrap();
        clients
            .lines()
            .any(|c| c.split_whitespace().any(|f| f == "resp=3"))
    };
    let what = "the waiter's shard subscription, over RESP3";
    let got = woken_by_the_announcement(held, &waiter, &keys, (what, over_resp3));
    got.unlock().unwrap();
}
