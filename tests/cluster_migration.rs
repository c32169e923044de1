//! A slot in migration (`CLUSTER SETSLOT ... IMPORTING` / `MIGRATING`, its
//! keys moved by `MIGRATE`, as `redis-cli --cluster reshard` does) under a
//! locker of `redmutex::cluster_pool`. Every script of the lock names
//! several keys, and Redis runs no multi-key command in a slot whose keys
//! are split between two nodes, or are missing from the target: both
//! nodes answer `TRYAGAIN` until the slot is given to the target. redis-rs's
//! cluster client used to wait that out itself (16 retries, over a second
//! apart); the client of `cluster_pool` retries once, 20 ms later, so the
//! locker must: a wait goes on through a migration, a lease is renewed
//! through it (a failed renewal, retried), and what the holder releases
//! during it is released.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    clippy::panic
)] // test helpers fail loudly, and tests spawn threads directly: that is the point

mod common;

use std::time::{Duration, Instant};

use common::{info_field, key, wait_until, Cluster};
use redmutex::{Backoff, LeaseState, Locker};

/// A slot moved from one master to another in steps, as a resharding
/// does: started, some of its keys moved, the rest moved and the slot
/// given to the target.
struct Migration<'a> {
    cluster: &'a Cluster,
    slot: u16,
    from: usize,
    to: usize,
}

impl<'a> Migration<'a> {
    /// `IMPORTING` at the target, `MIGRATING` at the source.
    fn start(cluster: &'a Cluster, slot: u16) -> Migration<'a> {
        let from = cluster.master_of(slot);
        let to = (from + 1) % cluster.nodes.len();
        let m = Migration {
            cluster,
            slot,
            from,
            to,
        };
        m.setslot(to, "IMPORTING", &cluster.node_id(from));
        m.setslot(from, "MIGRATING", &cluster.node_id(to));
        m
    }

    fn setslot(&self, node: usize, how: &str, id: &str) {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(self.slot)
            .arg(how)
            .arg(id)
            .query(&mut self.cluster.conn(node))
            .unwrap();
    }

    /// Moves up to `n` of the slot's keys to the target; how many it moved.
    fn move_keys(&self, n: usize) -> usize {
        let mut src = self.cluster.conn(self.from);
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(self.slot)
            .arg(n)
            .query(&mut src)
            .unwrap();
        if !keys.is_empty() {
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.cluster.nodes[self.to].port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut src)
                .unwrap();
        }
        keys.len()
    }

    /// The rest of the keys moved, and the slot given to the target on
    /// every master.
    fn finish(self) {
        while self.move_keys(100) > 0 {}
        let to_id = self.cluster.node_id(self.to);
        self.setslot(self.to, "NODE", &to_id);
        self.setslot(self.from, "NODE", &to_id);
        for i in 0..self.cluster.nodes.len() {
            if i != self.from && i != self.to {
                self.setslot(i, "NODE", &to_id);
            }
        }
        self.cluster.await_ok();
    }
}

/// `TRYAGAIN` answers given by every node so far (`INFO errorstats`).
fn tryagains(cluster: &Cluster) -> u64 {
    (0..cluster.nodes.len())
        .map(|i| {
            let info: String = redis::cmd("INFO")
                .arg("errorstats")
                .query(&mut cluster.conn(i))
                .unwrap();
            info_field(&info, "errorstat_TRYAGAIN")
                .and_then(|v| v.strip_prefix("count=")?.parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// A locker of `cluster_pool` with a fixed backoff of 100 ms and a TTL of
/// `ttl`.
fn locker(cluster: &Cluster, ttl: Duration) -> Locker {
    Locker::builder(redmutex::cluster_pool(cluster.urls()).unwrap())
        .ttl(ttl)
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .build()
        .unwrap()
}

/// Keys of one slot: `{tag}:name`.
fn in_slot(tag: &str) -> impl Fn(&str) -> String + '_ {
    move |name| format!("{{{tag}}}:{name}")
}

/// Until `n` more `TRYAGAIN` than `before` were answered, or `done` says
/// the call that draws them has ended; at most 30 s.
fn refused_more(cluster: &Cluster, before: u64, n: u64, done: &dyn Fn() -> bool) {
    wait_until("more TRYAGAIN answers", Duration::from_secs(30), || {
        done() || tryagains(cluster) >= before + n
    });
}

/// `lock` on a free key whose slot is in migration, its keys split
/// between the two masters: the wait goes on through the migration (each
/// attempt refused with `TRYAGAIN`) and gets the lock once the slot is
/// given to the target, as it did when redis-rs waited it out. Before, the
/// first `TRYAGAIN` ended the wait with that error. The migration lasts
/// well past one call's bound (the waiter's checkout and I/O timeouts are
/// 300 ms each), so it is the wait that goes on, not one call.
#[test]
fn a_wait_goes_on_through_a_migration_of_its_slot() {
    waits_through_a_migration("migrating-wait", Duration::from_millis(300), None);
}

/// A `lock` of a waiter whose checkout and I/O timeouts are `bound` each,
/// on a free key (of tag `tag`) whose slot is in migration, its keys split
/// between the two masters (another lock held in the slot, one of its keys
/// moved), while the two nodes of the migration answer within `slow` (see
/// [`Slow`]) if given: the wait goes on for three calls' bounds at least,
/// refused, and gets the lock once the slot is given to the target.
fn waits_through_a_migration(tag: &str, bound: Duration, slow: Option<Duration>) {
    let cluster = Cluster::start();
    let (owner, waiter) = (
        locker(&cluster, Duration::from_secs(60)),
        Locker::builder(redmutex::cluster_pool(cluster.urls()).unwrap())
            .ttl(Duration::from_secs(60))
            .checkout_timeout(bound)
            .io_timeout(bound)
            .backoff(Backoff::fixed(Duration::from_millis(100)))
            .build()
            .unwrap(),
    );
    let tag = key(tag);
    let k = in_slot(&tag);
    // Keys in the slot to move: another lock held there (its key, the
    // prefix's counter in the slot).
    let other = owner.lock(k("other")).unwrap();
    // The pool's map of the slots, learned before the migration.
    waiter
        .try_lock(key("elsewhere"))
        .unwrap()
        .unwrap()
        .unlock()
        .unwrap();
    let migration = Migration::start(&cluster, cluster.slot_of(&k("a")));
    assert!(migration.move_keys(1) == 1, "the slot's keys split");
    let slow = slow.map(|each| Slow::nodes(&cluster, &[migration.from, migration.to], each));
    let before = tryagains(&cluster);
    let started = Instant::now();
    let t = {
        let (waiter, key) = (waiter.clone(), k("a"));
        std::thread::spawn(move || waiter.lock(&key))
    };
    refused_more(&cluster, before, 3, &|| t.is_finished());
    wait_until("three calls' bounds", Duration::from_secs(30), || {
        t.is_finished() || started.elapsed() > 6 * bound
    });
    drop(slow);
    migration.finish();
    let got = t.join().unwrap();
    let guard = got.unwrap_or_else(|e| panic!("the wait ended in the migration: {e:?}"));
    assert_eq!(guard.state(), LeaseState::Held);
    guard.unlock().unwrap();
    other.unlock().unwrap();
}

/// A holder whose slot is in migration for several of its renewal
/// intervals (a TTL of 3 s, renewed every second; each renewal refused
/// with `TRYAGAIN` while the keys are split) keeps its lease once the
/// migration ends within the TTL: the refused renewals are failed ones,
/// retried, not a loss. Then it releases at the new master.
#[test]
fn a_lease_is_kept_through_a_migration_shorter_than_its_ttl() {
    let cluster = Cluster::start();
    let holder = locker(&cluster, Duration::from_secs(3));
    let tag = key("migrating-lease");
    let k = in_slot(&tag);
    let guard = holder.lock(k("held")).unwrap();
    let _more = holder.lock(k("more")).unwrap();
    let migration = Migration::start(&cluster, cluster.slot_of(&k("held")));
    assert!(migration.move_keys(1) == 1, "the slot's keys split");
    let before = tryagains(&cluster);
    // Two renewals refused (a renewal is due every second).
    refused_more(&cluster, before, 2, &|| guard.state() == LeaseState::Lost);
    migration.finish();
    assert_ne!(
        guard.state(),
        LeaseState::Lost,
        "lost in a migration shorter than the TTL"
    );
    guard.unlock().unwrap();
    assert!(holder.holder(k("held")).unwrap().is_none());
}

/// Contended hand-overs while the slot migrates: a holder releases with a
/// waiter of another locker queued, during the migration, and the waiter
/// gets the lock once the migration is over, long before the holder's TTL
/// (a minute) could have freed it. Nobody's call fails for the migration.
#[test]
fn a_hand_over_during_a_migration_reaches_the_waiter() {
    let cluster = Cluster::start();
    let (holder, waiter) = (
        locker(&cluster, Duration::from_secs(60)),
        locker(&cluster, Duration::from_secs(60)),
    );
    let tag = key("migrating-handover");
    let k = in_slot(&tag);
    let held = holder.lock(k("contended")).unwrap();
    let t = {
        let (waiter, key) = (waiter.clone(), k("contended"));
        std::thread::spawn(move || {
            let got = waiter.lock_timeout(&key, Duration::from_secs(60));
            (got, Instant::now())
        })
    };
    wait_until("the waiter queued", Duration::from_secs(20), || {
        holder
            .holder(k("contended"))
            .unwrap()
            .is_some_and(|h| !h.waiters().is_empty())
    });
    let migration = Migration::start(&cluster, cluster.slot_of(&k("contended")));
    assert!(migration.move_keys(1) == 1, "the slot's keys split");
    let before = tryagains(&cluster);
    let released = std::thread::spawn(move || held.unlock());
    refused_more(&cluster, before, 3, &|| {
        released.is_finished() && t.is_finished()
    });
    migration.finish();
    let finished = Instant::now();
    let unlocked = released.join().unwrap();
    let (got, at) = t.join().unwrap();
    assert!(
        unlocked.is_ok() && got.is_ok(),
        "in the migration, the release: {unlocked:?}; the wait: {:?}",
        got.as_ref().map(|_| ())
    );
    let took = at.saturating_duration_since(finished);
    assert!(
        took < Duration::from_secs(15),
        "the waiter got the lock {took:?} after the migration: by the holder's TTL, not a release"
    );
    got.unwrap().unlock().unwrap();
}

/// `try_lock` on a free key whose slot is in migration: one attempt,
/// which waits the migration out within its bound (checkout + I/O timeouts,
/// 10 s + 10 s here), as redis-rs's own retries did; and one whose bound
/// ends first (1 s + 1 s, 3 s more for a loaded machine) returns within it
/// with the refusal, not a busy lock.
#[test]
fn try_lock_waits_out_a_migration_within_its_bound() {
    let cluster = Cluster::start();
    let locker = |timeout: Duration| {
        Locker::builder(redmutex::cluster_pool(cluster.urls()).unwrap())
            .checkout_timeout(timeout)
            .io_timeout(timeout)
            .build()
            .unwrap()
    };
    let (patient, hasty) = (
        locker(Duration::from_secs(10)),
        locker(Duration::from_secs(1)),
    );
    let tag = key("migrating-try");
    let k = in_slot(&tag);
    let _other = patient.lock(k("other")).unwrap();
    let migration = Migration::start(&cluster, cluster.slot_of(&k("a")));
    assert!(migration.move_keys(1) == 1, "the slot's keys split");
    let started = Instant::now();
    let hasty_got = hasty.try_lock(k("a")).map(|g| g.is_some());
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?}: {hasty_got:?}");
    assert!(
        matches!(&hasty_got, Err(e) if format!("{e:?}").contains("TryAgain")),
        "{hasty_got:?}"
    );
    let before = tryagains(&cluster);
    let t = {
        let (patient, key) = (patient.clone(), k("a"));
        std::thread::spawn(move || patient.try_lock(&key).map(|g| g.is_some()))
    };
    refused_more(&cluster, before, 3, &|| t.is_finished());
    migration.finish();
    let got = t.join().unwrap();
    assert!(matches!(got, Ok(true)), "{got:?}");
}

/// Has nodes `nodes` of `cluster` answer slowly until dropped: each loops
/// `DEBUG SLEEP` of `each`, 30 ms apart (a reply waits for the sleep under
/// way, `each` at most).
struct Slow {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Slow {
    fn nodes(cluster: &Cluster, nodes: &[usize], each: Duration) -> Slow {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let threads = nodes
            .iter()
            .map(|&i| {
                let (mut c, stop) = (cluster.conn(i), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let _: () = redis::cmd("DEBUG")
                            .arg("SLEEP")
                            .arg(each.as_secs_f64())
                            .query(&mut c)
                            .unwrap();
                        let (_tx, rx) = std::sync::mpsc::channel::<()>();
                        let _ = rx.recv_timeout(Duration::from_millis(30));
                    }
                })
            })
            .collect();
        Slow { stop, threads }
    }
}

impl Drop for Slow {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A call refused while its slot moves is sent again within its bound
/// with half its I/O timeout a try at least: while the two nodes of the
/// migration take up to 300 ms to answer (less than a third of the
/// waiter's I/O timeout of 1 s), the wait goes on through the migration
/// and gets the lock once it ends. Before, a call sent again near the end
/// of its bound had 40 to 130 ms a try whatever the I/O timeout, timed out
/// there, and the timeout ended the wait (as a loaded machine made it
/// happen on Valkey 9.1 in `a_wait_goes_on_through_a_migration_of_its_slot`).
#[test]
fn a_call_sent_again_in_a_migration_keeps_its_io_timeout() {
    let (bound, slow) = (Duration::from_secs(1), Duration::from_millis(300));
    waits_through_a_migration("migrating-slow", bound, Some(slow));
}
