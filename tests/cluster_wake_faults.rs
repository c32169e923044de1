//! Hostile review of the cluster wake-ups (issue 36): a master that hangs
//! (`SIGSTOP`) instead of dying, while a waiter's shard subscription is at
//! it and its replica takes over.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::disallowed_methods
)] // test helpers fail loudly, and tests spawn threads directly: that is the point

mod common;

use std::time::{Duration, Instant};

use common::{key, slow_locker_over, wait_until, woken_by_the_announcement, Cluster};
use redmutex::{Backoff, Locker};

/// The tests here count this process's threads and log events: one at a
/// time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn sharded() -> bool {
    redmutex_testkit::server_version().is_none_or(|v| v >= (7, 0))
}

/// A connection to node `i` that cannot hang on a frozen node.
fn conn_within(cluster: &Cluster, i: usize) -> Option<redis::Connection> {
    let c = redis::Client::open(cluster.nodes[i].url())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    c.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    c.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    Some(c)
}

/// Shard channels with subscribers at node `i` (empty if it does not answer).
fn channels_at(cluster: &Cluster, i: usize) -> Vec<String> {
    conn_within(cluster, i)
        .and_then(|mut c| redis::cmd("PUBSUB").arg("SHARDCHANNELS").query(&mut c).ok())
        .unwrap_or_default()
}

/// `SIGCONT` for a frozen node, whatever happens in the test.
struct Frozen(u32);

impl Frozen {
    fn freeze(pid: u32) -> Frozen {
        signal(pid, "-STOP");
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// The master of a slot hangs (`SIGSTOP`: a frozen machine, or a
/// partition that drops packets) while a waiter of another locker is
/// subscribed there, and its replica takes over (`CLUSTER FAILOVER
/// TAKEOVER`, as an operator or the cluster's own failure detection does).
/// The listener must follow the slot to the new master (where the release
/// will be announced) within a few idle seconds, as it does when the master
/// dies or is demoted. Before the fix its connection to the frozen master
/// never fails (reads time out, and each idle second's `PING` and
/// `SSUBSCRIBE`s go into the socket buffer), so the channel stays
/// "subscribed" there for as long as the master is frozen (TCP gives up
/// after about 15 minutes), and every release meanwhile goes unheard: the
/// waiters wait their backoff.
///
/// (Whether the woken waiter then gets the lock depends on the user's
/// redis-rs cluster pool, which keeps sending the slot to the frozen master
/// after the takeover: measured here, a `try_lock` through it took 35 s,
/// then failed, with the default 16 retries; see the report. So this test
/// watches the subscription, not the lock.)
#[test]
fn the_listener_leaves_a_hung_master_whose_replica_took_over() {
    let _serial = serial();
    if !sharded() {
        return;
    }
    leaves_a_lost_master(false);
}

/// As [`the_listener_leaves_a_hung_master_whose_replica_took_over`], with
/// the master killed (`SIGKILL`) instead of frozen.
#[test]
fn the_listener_leaves_a_killed_master_whose_replica_took_over() {
    let _serial = serial();
    if !sharded() {
        return;
    }
    leaves_a_lost_master(true);
}

/// The master of a waiter's slot frozen (or `killed`), its replica takes
/// over: the waiter's channel is subscribed at the new master within 30 s.
fn leaves_a_lost_master(killed: bool) {
    let mut cluster = Cluster::start_with_replicas(1);
    let locker = || {
        Locker::builder(cluster.pool())
            .ttl(Duration::from_secs(60))
            .backoff(Backoff::fixed(Duration::from_secs(60)))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (locker(), locker());
    let tag = key("hung-master");
    let keys = vec![format!("{{{tag}}}:a"), format!("{{{tag}}}:b")];
    let master = cluster.master_of(cluster.slot_of(&keys[0]));
    let replica = cluster.replica_of(master);
    let _held = holder.lock_all(&keys).unwrap();
    {
        let (waiter, keys) = (waiter.clone(), keys.clone());
        // Not joined: its end depends on the pool (see above).
        std::thread::spawn(move || waiter.lock_all_timeout(&keys, Duration::from_secs(60)));
    }
    wait_until(
        "the waiter subscribed at the master",
        Duration::from_secs(20),
        || !channels_at(&cluster, master).is_empty(),
    );
    let frozen = if killed {
        cluster.nodes[master].kill();
        None
    } else {
        Some(Frozen::freeze(cluster.nodes[master].pid()))
    };
    let mut r = conn_within(&cluster, replica).unwrap();
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("TAKEOVER")
        .query(&mut r)
        .unwrap();
    wait_until("the replica promoted", Duration::from_secs(20), || {
        let Some(mut c) = conn_within(&cluster, replica) else {
            return false;
        };
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut c).unwrap();
        matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master")
    });
    let promoted = Instant::now();
    let deadline = promoted + Duration::from_secs(30);
    while channels_at(&cluster, replica).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let subscribed = channels_at(&cluster, replica);
    drop(frozen);
    assert!(
        !subscribed.is_empty(),
        "30 s after the takeover the waiter's channel is still not subscribed at the new \
         master: the listener stays with the frozen one, releases go unheard"
    );
}

/// Every `redmutex::listen` event logged in this test binary.
static LISTEN: std::sync::Mutex<Vec<(log::Level, String)>> = std::sync::Mutex::new(Vec::new());

struct Catch;

impl log::Log for Catch {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.target() == "redmutex::listen" {
            LISTEN
                .lock()
                .unwrap()
                .push((record.level(), record.args().to_string()));
        }
    }
    fn flush(&self) {}
}

static LOGGER: Catch = Catch;

/// Sets a password on every node of `cluster`, and returns a pool that
/// gives it (the sharded listener's connections do not).
fn password_pool(cluster: &Cluster) -> r2d2::Pool<redis::cluster::ClusterClient> {
    for i in 0..cluster.nodes.len() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg("s3cret")
            .query(&mut cluster.conn(i))
            .unwrap();
    }
    let client = redis::cluster::ClusterClient::builder(cluster.urls())
        .password("s3cret")
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    r2d2::Pool::builder()
        .max_size(4)
        .test_on_check_out(false)
        .build(client)
        .unwrap()
}

/// `requirepass` on every node of `cluster`, and an ACL user `app` (any
/// key, any channel); returns the nodes' URLs with the password, and with
/// the user's.
fn with_credentials(cluster: &Cluster) -> (Vec<String>, Vec<String>) {
    for i in 0..cluster.nodes.len() {
        let mut c = cluster.conn(i);
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("app")
            .arg("on")
            .arg(">app-pw")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg("s3cret")
            .query(&mut c)
            .unwrap();
    }
    let urls = |who: &str| -> Vec<String> {
        cluster
            .nodes
            .iter()
            .map(|n| format!("redis://{who}@127.0.0.1:{}/", n.port()))
            .collect()
    };
    (urls(":s3cret"), urls("app:app-pw"))
}

/// Shard channels with subscribers, over every node, asked with `urls`'
/// credentials.
fn shard_channels_with(urls: &[String]) -> Vec<String> {
    let mut all = Vec::new();
    for url in urls {
        let c = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5));
        if let Ok(mut c) = c {
            let mut some: Vec<String> = redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .query(&mut c)
                .unwrap_or_default();
            all.append(&mut some);
        }
    }
    all
}

/// A cluster that wants a password, or an ACL user's, reached through
/// `redmutex::cluster_pool` with the credentials in the nodes' URLs (as
/// most production clusters are): the sharded listener connects to the
/// masters with the pool's credentials, so a release wakes a waiter of
/// another locker through its announcement, as on a cluster without a
/// password. (Before, the listener connected by address alone, its
/// `SSUBSCRIBE` was refused with `NOAUTH`, and waiters polled: here, with
/// a minute of backoff, a multi-key waiter, which does not queue, waited
/// out its 30 s.)
#[test]
fn a_cluster_that_wants_a_password_wakes_its_waiters() {
    let _serial = serial();
    if !sharded() {
        return;
    }
    let cluster = Cluster::start();
    let (password, user) = with_credentials(&cluster);
    for urls in [password, user] {
        let locker = || slow_locker_over(redmutex::cluster_pool(&urls).unwrap());
        let (holder, waiter) = (locker(), locker());
        let tag = key("password-woken");
        let keys = vec![format!("{{{tag}}}:a"), format!("{{{tag}}}:b")];
        let held = holder.lock_all(&keys).unwrap();
        let subscribed = &mut || !shard_channels_with(&urls).is_empty();
        let what = "the waiter's shard subscription, made with the pool's credentials";
        let got = woken_by_the_announcement(held, &waiter, &keys, (what, subscribed));
        got.unlock().unwrap();
        wait_until("no subscription left", Duration::from_secs(20), || {
            shard_channels_with(&urls).is_empty()
        });
    }
}

/// A cluster that wants a password, reached through a pool of your own
/// `ClusterClient` (redis-rs shows none of its credentials): the listener
/// connects to the masters by address alone, so its `SSUBSCRIBE` is
/// refused. That must cost only the wake-ups: waiters poll with their
/// backoff and get the lock, no error reaches the user, and an `info` line
/// says why.
#[test]
fn a_password_cluster_through_a_client_of_your_own_polls_and_says_so() {
    let _serial = serial();
    if !sharded() {
        return;
    }
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Trace);
    let cluster = Cluster::start();
    let pool = password_pool(&cluster);
    let locker = || {
        Locker::builder(pool.clone())
            .backoff(Backoff::fixed(Duration::from_millis(200)))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (locker(), locker());
    let tag = key("password");
    for keys in [
        vec![key("password-single")],
        vec![format!("{{{tag}}}:a"), format!("{{{tag}}}:b")],
    ] {
        let held = holder.lock_all(&keys).unwrap();
        let t = {
            let (waiter, keys) = (waiter.clone(), keys.clone());
            std::thread::spawn(move || waiter.lock_all_timeout(&keys, Duration::from_secs(20)))
        };
        // Long enough for the waiter to try, start its listener and be refused.
        std::thread::sleep(Duration::from_secs(3));
        held.unlock().unwrap();
        t.join().unwrap().unwrap().unlock().unwrap();
    }
    let events = LISTEN.lock().unwrap().clone();
    assert!(
        events.iter().any(|(l, _)| *l <= log::Level::Info),
        "no info (or louder) line says why waiters poll: {events:?}"
    );
}

/// On a cluster of servers before 7.0 (no `SSUBSCRIBE`), waiters poll and
/// an `info` line says so (run with `REDIS_SERVER` set to a Redis 6.2; on
/// later servers this test has nothing to check).
#[test]
fn older_servers_poll_and_say_so() {
    let _serial = serial();
    if sharded() {
        return;
    }
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Trace);
    let cluster = Cluster::start();
    let locker = || {
        Locker::builder(cluster.pool())
            .backoff(Backoff::fixed(Duration::from_millis(200)))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (locker(), locker());
    let keys = vec![key("older-say")];
    let held = holder.lock_all(&keys).unwrap();
    let t = {
        let (waiter, keys) = (waiter.clone(), keys.clone());
        std::thread::spawn(move || waiter.lock_all_timeout(&keys, Duration::from_secs(20)))
    };
    wait_until("an info line", Duration::from_secs(20), || {
        LISTEN
            .lock()
            .unwrap()
            .iter()
            .any(|(l, m)| *l <= log::Level::Info && m.contains("refuses sharded pub/sub"))
    });
    held.unlock().unwrap();
    t.join().unwrap().unwrap().unlock().unwrap();
}

/// A `CLUSTER INFO` counter of node `i` (0 when not listed).
fn bus_counter(cluster: &Cluster, i: usize, field: &str) -> u64 {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut cluster.conn(i))
        .unwrap();
    common::info_field(&info, field).map_or(0, |v| v.parse().unwrap())
}

/// With replicas (as clusters run in production), no announcement leaves
/// the lock's shard: no other master or replica receives one over the
/// cluster bus, as a `PUBLISH` would be broadcast. (The shard's own
/// replica does: Redis sends it each `SPUBLISH`, about 35 bus messages over
/// 40 hand-overs; the docs once said nothing crossed the bus at all.)
#[test]
fn with_replicas_no_announcement_leaves_the_locks_shard() {
    let _serial = serial();
    if !sharded() {
        return;
    }
    let cluster = Cluster::start_with_replicas(1);
    let lockers: Vec<Locker> = (0..2)
        .map(|_| {
            Locker::builder(cluster.pool())
                .backoff(Backoff::fixed(Duration::from_secs(60)))
                .build()
                .unwrap()
        })
        .collect();
    let k = key("shard-replicas");
    let master = cluster.master_of(cluster.slot_of(&k));
    let replica = cluster.replica_of(master);
    let counters = |field: &str| -> Vec<u64> {
        (0..cluster.nodes.len())
            .map(|i| bus_counter(&cluster, i, field))
            .collect()
    };
    let (shard, all) = (
        "cluster_stats_messages_publishshard_received",
        "cluster_stats_messages_publish_received",
    );
    let (shard_before, all_before) = (counters(shard), counters(all));
    std::thread::scope(|s| {
        for w in 0..4 {
            let (locker, k) = (&lockers[w % 2], &k);
            s.spawn(move || {
                for _ in 0..10 {
                    let g = locker.lock_timeout(k, Duration::from_secs(30)).unwrap();
                    g.unlock().unwrap();
                }
            });
        }
    });
    assert_eq!(counters(all), all_before, "a PUBLISH was broadcast");
    let shard_after = counters(shard);
    for i in 0..cluster.nodes.len() {
        if i != master && i != replica {
            assert_eq!(
                shard_after[i], shard_before[i],
                "node {i}, outside the lock's shard, received announcements"
            );
        }
    }
}

/// This process's threads named as the sharded listener's.
fn shard_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("redmutex-shard"))
        .count()
}

/// Rounds of waiters over many keys and slots: every round's threads and
/// connections end once nobody waits, whatever came before.
#[test]
fn no_thread_or_connection_is_left_after_rounds_over_many_slots() {
    let _serial = serial();
    if !sharded() {
        return;
    }
    let cluster = Cluster::start();
    let locker = || {
        Locker::builder(cluster.pool())
            .backoff(Backoff::fixed(Duration::from_secs(60)))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (locker(), locker());
    // Those of an earlier test here end once its waiters are gone.
    wait_until("no listener thread before", Duration::from_secs(60), || {
        shard_threads() == 0
    });
    for round in 0..3 {
        let keys: Vec<String> = (0..40)
            .map(|i| key(&format!("rounds-{round}-{i}")))
            .collect();
        let held: Vec<_> = keys.iter().map(|k| holder.lock(k).unwrap()).collect();
        let waiting: Vec<_> = keys
            .iter()
            .map(|k| {
                let (waiter, k) = (waiter.clone(), k.clone());
                std::thread::spawn(move || waiter.lock_timeout(&k, Duration::from_secs(30)))
            })
            .collect();
        wait_until("the waiters' listeners", Duration::from_secs(20), || {
            shard_threads() > 0
        });
        assert!(
            shard_threads() <= 3,
            "one thread per master at most: {}",
            shard_threads()
        );
        drop(held);
        for t in waiting {
            t.join().unwrap().unwrap().unlock().unwrap();
        }
        wait_until("no listener thread left", Duration::from_secs(15), || {
            shard_threads() == 0
        });
        wait_until(
            "no pub/sub connection left",
            Duration::from_secs(15),
            || {
                (0..3).all(|i| {
                    let list: String = redis::cmd("CLIENT")
                        .arg("LIST")
                        .arg("TYPE")
                        .arg("pubsub")
                        .query(&mut cluster.conn(i))
                        .unwrap();
                    list.trim().is_empty()
                })
            },
        );
    }
}

/// Every call on a key whose cluster master hangs (`SIGSTOP`: a frozen
/// machine, or a partition that drops packets) comes back within its
/// documented bound, as on one server: through a pool of
/// `redmutex::cluster_pool`, with 1 s checkout and I/O timeouts (so one
/// bound `B` of checkout + I/O is 2 s): `try_lock` and `holder` within
/// `B`, `run_if_held` within a checkout and two I/O timeouts, `extend`,
/// `unlock` and a drop within `2 B` (a renewal in flight first, then their
/// own call), `lock_timeout` within its wait, one attempt, one call to
/// leave the queue and the listener's start-up, and `locks` within `B` a
/// master and one more (the cluster's shape). Each is given 3 s more (a
/// loaded machine). Before, redis-rs's cluster client sent a call that
/// timed out again by itself, 16 times by default, below the locker:
/// `try_lock`, `holder` and `unlock` took 17 I/O timeouts (17.4 s), a drop
/// with a renewal in flight 34.3 s, and `locks`, once the cluster said
/// `CLUSTERDOWN` (the master failed for the other nodes), 689 s of the
/// client's own growing pauses.
#[test]
fn every_call_to_a_hung_cluster_master_returns_within_its_bound() {
    let _serial = serial();
    let cluster = Cluster::start();
    let (checkout, io) = (Duration::from_secs(1), Duration::from_secs(1));
    let bound = checkout + io;
    let locker = |ttl: Duration| {
        Locker::builder(redmutex::cluster_pool(cluster.urls()).unwrap())
            .checkout_timeout(checkout)
            .io_timeout(io)
            .ttl(ttl)
            .build()
            .unwrap()
    };
    // Leases that outlast the test, and one renewed every half second.
    let (locker, renewing) = (
        locker(Duration::from_secs(120)),
        locker(Duration::from_millis(1500)),
    );
    let tag = key("hung-call");
    let k = |name: &str| format!("{{{tag}}}:{name}");
    let master = cluster.master_of(cluster.slot_of(&k("free")));
    // Scripts loaded and connections made while the master answers.
    locker
        .try_lock(k("free"))
        .unwrap()
        .unwrap()
        .unlock()
        .unwrap();
    let mut held: Vec<_> = ["run", "extend", "unlock", "drop"]
        .iter()
        .map(|name| Some(locker.lock(k(name)).unwrap()))
        .collect();
    let mut renewed = Some(renewing.lock(k("renewed")).unwrap());
    let frozen = Frozen::freeze(cluster.nodes[master].pid());
    let within = |what: &str, bound: Duration, call: &mut dyn FnMut() -> String| {
        let started = Instant::now();
        let got = call();
        let took = started.elapsed();
        assert!(
            took <= bound + Duration::from_secs(3),
            "{what} took {took:?} with a hung master, past its bound of {bound:?} \
             (+3 s): {got}"
        );
    };
    // Its watchdog renews every half second: by now a renewal is under way
    // at the hung master (a precondition a loaded machine may miss; the
    // bound holds either way).
    std::thread::sleep(Duration::from_secs(1));
    within("drop, a renewal in flight", 2 * bound, &mut || {
        drop(renewed.take());
        String::new()
    });
    within("try_lock", bound, &mut || {
        format!("{:?}", locker.try_lock(k("free")).map(|g| g.is_some()))
    });
    within("holder", bound, &mut || {
        format!("{:?}", locker.holder(k("run")).map(|h| h.is_some()))
    });
    within("run_if_held", checkout + 2 * io, &mut || {
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(k("data")).arg(1);
        let guard = held[0].as_ref().unwrap();
        format!("{:?}", guard.run_if_held(&pipe).map(|_| ()))
    });
    within("extend", 2 * bound, &mut || {
        let guard = held[1].as_ref().unwrap();
        format!("{:?}", guard.extend(Duration::from_secs(120)))
    });
    within("unlock", 2 * bound, &mut || {
        format!("{:?}", held[2].take().map(redmutex::Guard::unlock))
    });
    within("drop", 2 * bound, &mut || {
        drop(held[3].take());
        String::new()
    });
    let wait = Duration::from_millis(300);
    within("lock_timeout", wait + 3 * bound, &mut || {
        format!("{:?}", locker.lock_timeout(k("run"), wait).map(|_| ()))
    });
    within("locks", 4 * bound, &mut || {
        format!("{:?}", locker.locks().map(|l| l.len()))
    });
    drop(frozen);
}

/// A lock handed over to a queued waiter whose announcement is never heard
/// (here: a cluster that wants a password, so the listener cannot
/// subscribe) is still found by the waiter, through its place's refresh
/// every second, long before its minute of backoff and before the claim
/// runs out: it is not lost, nor left to expire.
#[test]
fn a_handed_over_lock_is_found_without_its_announcement() {
    let _serial = serial();
    let cluster = Cluster::start();
    let pool = password_pool(&cluster);
    let locker = || {
        Locker::builder(pool.clone())
            .backoff(Backoff::fixed(Duration::from_secs(60)))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (locker(), locker());
    let k = key("handed-unheard");
    for _ in 0..3 {
        let held = holder.lock(&k).unwrap();
        let t = {
            let (waiter, k) = (waiter.clone(), k.clone());
            std::thread::spawn(move || {
                let got = waiter.lock_timeout(&k, Duration::from_secs(30));
                (got, Instant::now())
            })
        };
        std::thread::sleep(Duration::from_secs(2));
        held.unlock().unwrap();
        let released = Instant::now();
        let (got, at) = t.join().unwrap();
        let took = at.saturating_duration_since(released);
        got.unwrap().unlock().unwrap();
        assert!(took < Duration::from_secs(5), "found after {took:?}");
    }
}

/// Through `cluster_pool`, whose client sends a call again once at most
/// (to keep the bound above), a redirection is still followed. A slot in
/// migration: the source, without the script's keys, answers `ASK`, and
/// the client asks the target, which refuses a script whose keys it does
/// not all have with `TRYAGAIN` (Redis runs no multi-key command in a slot
/// split between two nodes): the call fails with that, at once, not with
/// the `ASK` itself. Then the slot moved (`MOVED`, the client's map of the
/// slots out of date): a grant and its release each follow it.
#[test]
fn a_cluster_pool_follows_ask_and_moved() {
    let _serial = serial();
    let cluster = Cluster::start();
    let locker = Locker::open_cluster(cluster.urls()).unwrap();
    let tag = key("redirected");
    let k = |name: &str| format!("{{{tag}}}:{name}");
    let slot = cluster.slot_of(&k("a"));
    let from = cluster.master_of(slot);
    let to = (from + 1) % cluster.nodes.len();
    // The pool's connection learns the slots as they are now (a key of
    // another slot, so that nothing of the tag exists yet).
    locker
        .try_lock(key("elsewhere"))
        .unwrap()
        .unwrap()
        .unlock()
        .unwrap();
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    let setslot = |node: usize, how: &str, id: &str| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .query(&mut cluster.conn(node))
            .unwrap();
    };
    setslot(to, "IMPORTING", &from_id);
    setslot(from, "MIGRATING", &to_id);
    // None of the script's keys is at the source: ASK, to the target.
    let started = Instant::now();
    let asked = locker.try_lock(k("a")).map(|g| g.is_some());
    let took = started.elapsed();
    assert!(
        matches!(&asked, Err(e) if format!("{e:?}").contains("TryAgain")),
        "the target's answer, the ASK followed: {asked:?}"
    );
    assert!(took < Duration::from_secs(4), "{took:?}");
    for node in 0..cluster.nodes.len() {
        setslot(node, "NODE", &to_id);
    }
    cluster.await_ok();
    // The pool's map still sends the slot to the source: MOVED.
    let moved = locker
        .try_lock(k("b"))
        .unwrap()
        .expect("granted at the new master");
    assert!(locker.holder(k("b")).unwrap().is_some());
    moved.unlock().unwrap();
    assert!(locker.holder(k("b")).unwrap().is_none());
}
