//! A Redis Cluster over TLS only, with a certificate authority of its own
//! (the `tls` feature): through a `ClusterManager` given the authority, the
//! sharded release listener connects to the masters over TLS as the pool
//! does, so a release wakes a waiter of another locker through its
//! announcement. (A listener that connected by address alone, as through a
//! pool of a plain `ClusterClient`, gets no connection at all there.)
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::disallowed_methods)] // tests fail loudly and spawn threads directly

mod common;

use std::time::Duration;

use common::{key, slow_locker_over, woken_by_the_announcement, TempDir, TlsFiles};
use redis::cluster::ClusterClient;
use redis::TlsCertificates;
use redmutex::ClusterManager;
use redmutex_testkit as support;

#[test]
fn a_tls_cluster_wakes_its_waiters_through_a_cluster_manager() {
    if support::server_version().is_some_and(|v| v < (7, 0)) {
        return; // no sharded pub/sub: waiters poll (tests/cluster_wakeups.rs)
    }
    let dir = TempDir::new("cluster-tls");
    let files = TlsFiles::new(&dir.0);
    let cli = ["--tls", "--cacert", &files.ca];
    let (nodes, nodes_dir) =
        support::cluster::start_tls_cluster(&files.server_args(), &cli, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("a TLS cluster (a redis-server built with TLS): {e}"));
    let _nodes_dir = TempDir(nodes_dir);
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| format!("rediss://127.0.0.1:{}/", n.port()))
        .collect();
    let certs = || TlsCertificates {
        client_tls: None,
        root_cert: Some(files.ca_pem.clone().into_bytes()),
    };
    let node = redis::Client::build_with_tls(urls[0].as_str(), certs())
        .unwrap()
        .get_connection_info()
        .clone();
    let locker = || {
        let builder = ClusterClient::builder(urls.clone()).certs(certs());
        let manager = ClusterManager::new(builder, node.clone()).unwrap();
        slow_locker_over(
            r2d2::Pool::builder()
                .max_size(8)
                .test_on_check_out(false)
                .build_unchecked(manager),
        )
    };
    let (holder, waiter) = (locker(), locker());
    let tag = key("tls-cluster");
    let keys = vec![format!("{{{tag}}}:a"), format!("{{{tag}}}:b")];
    let held = holder.lock_all(&keys).unwrap();
    let subscribed = &mut || {
        urls.iter().any(|url| {
            let client = redis::Client::build_with_tls(url.as_str(), certs()).unwrap();
            let Ok(mut c) = client.get_connection_with_timeout(Duration::from_secs(5)) else {
                return false;
            };
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .query(&mut c)
                .unwrap_or_default();
            !channels.is_empty()
        })
    };
    let what = "the waiter's shard subscription, over TLS";
    let got = woken_by_the_announcement(held, &waiter, &keys, (what, subscribed));
    got.unlock().unwrap();
}
