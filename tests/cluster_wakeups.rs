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

/// Whether the servers under test have sharded pub/sub (Redis 7.0 and
/// later, Valkey). Before that, every test here checks the fallback
/// instead (see [`older_servers_poll`]).
fn sharded() -> bool {
    redmutex_testkit::server_version().is_none_or(|v| v >= (7, 0))
}

/// On a server before 7.0 (no `SSUBSCRIBE`; the scripts' `SPUBLISH` fails
/// quietly), waiters poll with their backoff and still get the lock.
fn older_servers_poll() {
    let cluster = Cluster::start();
    let lockers: Vec<Locker> = (0..2)
        .map(|_| {
            Locker::builder(cluster.pool())
                .backoff(Backoff::fixed(Duration::from_millis(200)))
                .build()
                .unwrap()
        })
        .collect();
    for keys in [vec![key("older-single")], tagged("older-all")] {
        let held = lockers[0].lock_all(&keys).unwrap();
        let (waiter, keys2) = (lockers[1].clone(), keys.clone());
        let t =
            std::thread::spawn(move || waiter.lock_all_timeout(&keys2, Duration::from_secs(20)));
        drop(held);
        t.join().unwrap().unwrap().unlock().unwrap();
    }
}

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
        // Long enough for a failover and the listener's move on a loaded
        // machine: the release's wake-up is measured from the release.
        let got = waiter.lock_all_timeout(&keys, Duration::from_secs(120));
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
    // The listener looks at its slot every idle second; a loaded machine
    // (load average 20 on 2 cores) took more than 20 s.
    wait_until(
        "the waiter subscribed at the new master",
        Duration::from_secs(60),
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
    if !sharded() {
        return older_servers_poll();
    }
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
    if !sharded() {
        return older_servers_poll();
    }
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
    woken_by_the_release(held, t).unlock().unwrap();
}

#[test]
fn waiters_are_woken_after_their_slot_moved_and_across_the_move() {
    if !sharded() {
        return older_servers_poll();
    }
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
    woken_by_the_release(held, t).unlock().unwrap();
}

/// A statistic summed over every node: a `CLUSTER INFO` field (0 when not
/// listed), or a
/// command's calls in `INFO commandstats` (`cmdstat_<name>`).
fn summed(cluster: &Cluster, what: &str) -> u64 {
    let mut n = 0;
    for i in 0..cluster.nodes.len() {
        let mut c = cluster.conn(i);
        if let Some(cmd) = what.strip_prefix("cmdstat_") {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut c)
                .unwrap();
            let prefix = format!("cmdstat_{cmd}:calls=");
            n += info
                .lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |v| v.parse::<u64>().unwrap());
        } else {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
            // A message type never sent or received is not listed.
            n += common::info_field(&info, what).map_or(0, |v| v.parse::<u64>().unwrap());
        }
    }
    n
}

#[test]
fn no_announcement_crosses_the_cluster_bus() {
    if !sharded() {
        return older_servers_poll();
    }
    let cluster = Cluster::start();
    let lockers: Vec<Locker> = (0..2)
        .map(|_| {
            Locker::builder(cluster.pool())
                .backoff(Backoff::fixed(Duration::from_secs(60)))
                .build()
                .unwrap()
        })
        .collect();
    let k = key("shard-bus");
    let bus = [
        "cluster_stats_messages_publish_sent",
        "cluster_stats_messages_publishshard_sent",
        "cluster_stats_messages_publish_received",
        "cluster_stats_messages_publishshard_received",
    ];
    let before: Vec<u64> = bus.iter().map(|f| summed(&cluster, f)).collect();
    let spublish = summed(&cluster, "cmdstat_spublish");
    let publish = summed(&cluster, "cmdstat_publish");
    // 4 workers of 2 lockers (as 2 processes), 25 contended hand-overs
    // each: with a minute of backoff, only announcements move them along.
    std::thread::scope(|s| {
        for w in 0..4 {
            let (locker, k) = (&lockers[w % 2], &k);
            s.spawn(move || {
                for _ in 0..25 {
                    let g = locker.lock_timeout(k, Duration::from_secs(30)).unwrap();
                    std::thread::yield_now();
                    g.unlock().unwrap();
                }
            });
        }
    });
    let after: Vec<u64> = bus.iter().map(|f| summed(&cluster, f)).collect();
    assert_eq!(
        before, after,
        "no announcement may cross the cluster bus ({bus:?})"
    );
    let announced = summed(&cluster, "cmdstat_spublish") - spublish;
    assert!(
        announced >= 100,
        "every release announced with SPUBLISH: {announced}"
    );
    assert_eq!(
        summed(&cluster, "cmdstat_publish"),
        publish,
        "never PUBLISH"
    );
    // The control: a plain PUBLISH does cross the bus (to both other
    // masters), so the counters above would have seen it.
    let _: i64 = redis::cmd("PUBLISH")
        .arg("control")
        .arg("x")
        .query(&mut cluster.conn(0))
        .unwrap();
    wait_until(
        "the control's bus messages",
        Duration::from_secs(10),
        || summed(&cluster, bus[0]) > after[0],
    );
}

/// How many pub/sub connections each node has.
fn pubsub_clients(cluster: &Cluster) -> Vec<usize> {
    (0..cluster.nodes.len())
        .map(|i| {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .arg("TYPE")
                .arg("pubsub")
                .query(&mut cluster.conn(i))
                .unwrap();
            list.lines().filter(|l| !l.trim().is_empty()).count()
        })
        .collect()
}

#[test]
fn one_connection_per_shard_with_waiters_closed_when_idle() {
    if !sharded() {
        return older_servers_poll();
    }
    let cluster = Cluster::start();
    let (holder, waiter) = (slow_locker(&cluster), slow_locker(&cluster));
    // Keys over many slots, on every master.
    let keys: Vec<String> = (0..24).map(|i| key(&format!("per-shard-{i}"))).collect();
    let mut slots: Vec<u16> = keys.iter().map(|k| cluster.slot_of(k)).collect();
    slots.sort_unstable();
    slots.dedup();
    let held: Vec<Guard> = keys.iter().map(|k| holder.lock(k).unwrap()).collect();
    let waiting: Vec<_> = keys
        .iter()
        .map(|k| {
            let (waiter, k) = (waiter.clone(), k.clone());
            std::thread::spawn(move || waiter.lock_timeout(&k, Duration::from_secs(30)))
        })
        .collect();
    wait_until(
        "every slot's channel subscribed",
        Duration::from_secs(20),
        || cluster.shard_channels().len() == slots.len(),
    );
    assert_eq!(
        pubsub_clients(&cluster),
        vec![1, 1, 1],
        "one connection per master, whatever the number of slots ({})",
        slots.len()
    );
    drop(held);
    for t in waiting {
        t.join().unwrap().unwrap().unlock().unwrap();
    }
    wait_until(
        "the connections closed once nobody waits",
        Duration::from_secs(10),
        || pubsub_clients(&cluster) == vec![0, 0, 0],
    );
}
