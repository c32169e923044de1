//! On a Redis Cluster (7.0 and later), a release wakes the waiters of
//! another locker (as in another process) through sharded pub/sub, not
//! their backoff: on a cluster as it started, after a failover and after
//! the lock's slot moved to another master, waiting across the change.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::disallowed_methods
)] // test helpers fail loudly, and tests spawn threads directly: that is the point

mod common;

use std::time::{Duration, Instant};

use common::{key, wait_until, Cluster};
use redmutex::{Backoff, Error, Guard, Locker};

/// A minute of backoff and TTL: a waiter woken in less than 15 s was woken
/// by the release.
fn slow_locker(cluster: &Cluster) -> Locker {
    Locker::builder(cluster.pool())
        .ttl(Duration::from_secs(60))
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap()
}

type Waiting = std::thread::JoinHandle<(Result<Guard, Error>, Instant)>;

/// `waiter` waits (30 s at most) for `keys`, held by someone else; returns
/// once it has tried and a shard channel has a subscriber (its listener's,
/// or one left from an earlier wait and kept for it).
fn wait_behind(cluster: &Cluster, waiter: &Locker, keys: &[String]) -> Waiting {
    let before = cluster.evalsha_calls();
    let (waiter, keys) = (waiter.clone(), keys.to_vec());
    let t = std::thread::spawn(move || {
        let got = waiter.lock_all_timeout(&keys, Duration::from_secs(30));
        (got, Instant::now())
    });
    wait_until(
        "the waiter's shard subscription",
        Duration::from_secs(20),
        || cluster.evalsha_calls() > before && !cluster.shard_channels().is_empty(),
    );
    t
}

/// Until master `node` has a shard channel subscriber.
fn subscribed_at(cluster: &Cluster, node: usize) {
    wait_until(
        "the waiter subscribed at the new master",
        Duration::from_secs(20),
        || {
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .query(&mut cluster.conn(node))
                .unwrap();
            !channels.is_empty()
        },
    );
}

/// Releases `held` and checks that the waiter got the lock long before
/// its backoff could have let it: the release woke it.
fn woken_by_the_release(held: Guard, waiting: Waiting) -> Guard {
    let released = Instant::now();
    drop(held);
    let (got, at) = waiting.join().unwrap();
    let guard = got.unwrap();
    let took = at.saturating_duration_since(released);
    assert!(
        took < Duration::from_secs(15),
        "woken after {took:?}: by its backoff, not by the release"
    );
    guard
}

/// A multi-key lock (hash-tagged: one slot) does not queue: its waiter has
/// nothing but its backoff, or the release's announcement.
fn tagged(name: &str) -> Vec<String> {
    let tag = key(name);
    vec![format!("{{{tag}}}:a"), format!("{{{tag}}}:b")]
}

#[test]
fn a_release_wakes_a_waiter_of_another_locker_through_sharded_pubsub() {
    let cluster = Cluster::start();
    let (holder, waiter) = (slow_locker(&cluster), slow_locker(&cluster));
    // A single-key lock (queued: the release hands it over) and a
    // multi-key one (not queued: the release frees it).
    let single = vec![key("shard-woken")];
    for keys in [single, tagged("shard-woken-all")] {
        let held = holder.lock_all(&keys).unwrap();
        let t = wait_behind(&cluster, &waiter, &keys);
        let got = woken_by_the_release(held, t);
        got.unlock().unwrap();
    }
}

#[test]
fn waiters_are_woken_after_a_failover_and_across_one() {
    let cluster = Cluster::start_with_replicas(1);
    let (holder, waiter) = (slow_locker(&cluster), slow_locker(&cluster));
    let keys = tagged("shard-failover");
    // Once before, so the listener is subscribed at the old master.
    let held = holder.lock_all(&keys).unwrap();
    let t = wait_behind(&cluster, &waiter, &keys);
    woken_by_the_release(held, t).unlock().unwrap();
    // A waiter waits across the failover of the lock's master.
    let held = holder.lock_all(&keys).unwrap();
    let t = wait_behind(&cluster, &waiter, &keys);
    let master = cluster.master_of(cluster.slot_of(&keys[0]));
    let replica = cluster.replica_of(master);
    cluster.fail_over_to(replica);
    // The demoted master drops the subscription (said or not): the
    // listener follows the slot to the new master.
    subscribed_at(&cluster, replica);
    woken_by_the_release(held, t).unlock().unwrap();
    // And a new wait after it.
    let held = holder.lock_all(&keys).unwrap();
    let t = wait_behind(&cluster, &waiter, &keys);
    woken_by_the_release(held, t);
}

#[test]
fn waiters_are_woken_after_their_slot_moved_and_across_the_move() {
    let cluster = Cluster::start();
    let (holder, waiter) = (slow_locker(&cluster), slow_locker(&cluster));
    let keys = tagged("shard-moved");
    let slot = cluster.slot_of(&keys[0]);
    let held = holder.lock_all(&keys).unwrap();
    let t = wait_behind(&cluster, &waiter, &keys);
    let from = cluster.master_of(slot);
    let to = (from + 1) % 3;
    cluster.migrate_slot(slot, from, to);
    assert_eq!(cluster.master_of(slot), to);
    // The server drops the moved slot's subscribers; the listener follows
    // the slot to its new master.
    subscribed_at(&cluster, to);
    woken_by_the_release(held, t).unlock().unwrap();
    // Back again, and a new wait after it.
    cluster.migrate_slot(slot, to, from);
    let held = holder.lock_all(&keys).unwrap();
    let t = wait_behind(&cluster, &waiter, &keys);
    woken_by_the_release(held, t);
}
