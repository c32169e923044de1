//! Operating it (issue 35): `Locker::locks` lists every lock, permit and
//! read/write hold with its metadata and waiters and no internal key (one
//! server and a Cluster); `Locker::break_lock` frees a hold for an
//! operator: the holder learns it at its next renewal with the reason, the
//! head waiter is handed the lock with a larger token; a free key is left
//! alone; the audit stream keeps every break with its fields.
// Test helpers fail loudly: that is the point.
#![allow(
    clippy::disallowed_methods,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use common::{dump, holders_of, key, redlock_builder, servers, wait_until, Cluster, Server};
use redmutex::{Error, Guard, LockInfo, LockKind, Locker};

/// A locker over its own pool (as another process) with `metadata`, a
/// short TTL (renewals every 300 ms) and a prefix.
fn locker(server: &Server, prefix: &str, metadata: &str) -> Locker {
    server
        .builder()
        .prefix(prefix)
        .metadata(metadata)
        .ttl(Duration::from_millis(900))
        .build()
        .unwrap()
}

/// The listing's entry for `key`.
fn entry<'a>(list: &'a [LockInfo], key: &str) -> &'a LockInfo {
    list.iter()
        .find(|i| i.key() == key)
        .unwrap_or_else(|| panic!("{key} not listed in {list:?}"))
}

/// Waits until the listing shows `n` waiters on `key`.
fn until_waiters(locker: &Locker, key: &str, n: usize) {
    wait_until("the waiter queued", Duration::from_secs(20), || {
        locker
            .locks()
            .unwrap()
            .iter()
            .any(|i| i.key() == key && i.waiters().len() == n)
    });
}

/// `b` waiting for the lock `key` on a thread, for up to 30 s, once `a`'s
/// listing shows it queued.
fn lock_behind(a: &Locker, b: &Locker, key: &str) -> JoinHandle<Result<Guard, Error>> {
    let (b, k) = (b.clone(), key.to_owned());
    let waiting = std::thread::spawn(move || b.lock_timeout(&k, Duration::from_secs(30)));
    until_waiters(a, key, 1);
    waiting
}

/// `b` waiting for a permit of the one-permit semaphore `name` on a
/// thread, for up to 30 s, once `a`'s listing shows it queued; the listed
/// name of that permit.
fn permit_behind(a: &Locker, b: &Locker, name: &str) -> (JoinHandle<Result<Guard, Error>>, String) {
    let sem = b.semaphore(name, 1).unwrap();
    let waiting = std::thread::spawn(move || sem.acquire_timeout(Duration::from_secs(30)));
    let listed = format!("__redmutex__:permit:0:{name}");
    until_waiters(a, &listed, 1);
    (waiting, listed)
}

#[test]
fn listing_shows_every_hold_with_its_waiters_and_no_internal_key() {
    let server = Server::start();
    let prefix = key("list");
    let (a, b) = (
        locker(&server, &prefix, "alpha"),
        locker(&server, &prefix, "beta"),
    );
    let lock = a.lock("report").unwrap();
    let sem = a.semaphore("exports", 2).unwrap();
    let permit = sem.acquire().unwrap();
    let rw = a.rwlock("config").unwrap();
    let read = rw.read().unwrap();
    let other = a.rwlock("schema").unwrap();
    let write = other.write().unwrap();
    // A waiter behind the lock, from another locker.
    let waiting = lock_behind(&a, &b, "report");

    let list = a.locks().unwrap();
    let report = entry(&list, "report");
    assert_eq!(report.kind(), LockKind::Lock);
    assert_eq!(report.metadata(), "alpha");
    assert_eq!(report.fencing_token(), lock.fencing_token());
    assert!(report.ttl() <= Duration::from_millis(900) && report.ttl() > Duration::ZERO);
    assert_eq!(report.waiters(), ["beta"]);

    let permit_key = format!("__redmutex__:permit:{}:exports", permit.permit().unwrap());
    let p = entry(&list, &permit_key);
    assert_eq!(p.kind(), LockKind::Permit);
    assert_eq!(p.name(), "exports");
    assert_eq!(p.fencing_token(), permit.fencing_token());
    assert_eq!(p.metadata(), "alpha");

    let r = list
        .iter()
        .find(|i| i.kind() == LockKind::Read)
        .expect("the read hold");
    assert!(r.key().starts_with("__redmutex__:rw-read:") && r.key().ends_with(":config"));
    assert_eq!(r.name(), "config");
    assert_eq!(r.fencing_token(), read.fencing_token());
    let w = entry(&list, "__redmutex__:rw-write:schema");
    assert_eq!(w.kind(), LockKind::Write);
    assert_eq!(w.fencing_token(), write.fencing_token());

    // Nothing else: no counter, queue, waiters' hash or set of read holds.
    assert_eq!(list.len(), 4, "{list:?}");
    // The filter is a glob on the names listed.
    let only: Vec<String> = a
        .locks_matching("rep*")
        .unwrap()
        .iter()
        .map(|i| i.key().to_owned())
        .collect();
    assert_eq!(only, ["report"]);
    // Another prefix sees none of them.
    let elsewhere = locker(&server, &key("other"), "x");
    assert!(elsewhere.locks().unwrap().is_empty());

    drop(lock);
    let (got, ..) = (waiting.join().unwrap().unwrap(),);
    drop(got);
    drop((permit, read, write));
}

#[test]
fn listing_walks_every_master_of_a_cluster() {
    let cluster = Cluster::start();
    let locker = Locker::builder(cluster.pool())
        .prefix("ops")
        .metadata("c")
        .build()
        .unwrap();
    let names: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
    let guards: Vec<_> = names.iter().map(|k| locker.lock(k).unwrap()).collect();
    let sem = locker.semaphore("pool", 3).unwrap();
    let permit = sem.acquire().unwrap();
    let list = locker.locks().unwrap();
    let mut listed: Vec<String> = list
        .iter()
        .filter(|i| i.kind() == LockKind::Lock)
        .map(|i| i.key().to_owned())
        .collect();
    listed.sort();
    let mut want = names.clone();
    want.sort();
    assert_eq!(listed, want);
    let p = list
        .iter()
        .find(|i| i.kind() == LockKind::Permit)
        .expect("the permit");
    assert_eq!(p.name(), "pool");
    assert_eq!(p.fencing_token(), permit.fencing_token());
    assert_eq!(list.len(), names.len() + 1, "internal keys listed");
    // A listed permit can be broken by the name the listing gives.
    assert!(locker.break_lock(p.key(), "test").unwrap().is_some());
    drop(guards);
}

#[test]
fn a_broken_holder_learns_it_and_the_head_waiter_is_handed_the_lock() {
    let server = Server::start();
    let prefix = key("break");
    let (a, b) = (
        locker(&server, &prefix, "alpha"),
        locker(&server, &prefix, "beta"),
    );
    let held = a.lock("job").unwrap();
    let waiting = lock_behind(&a, &b, "job");

    let broken = a.break_lock("job", "stuck since 3 a.m.").unwrap().unwrap();
    assert_eq!(broken.metadata(), "alpha");
    assert_eq!(broken.fencing_token(), held.fencing_token());
    // Handed over by the break itself, as a release does.
    let now = a.holder("job").unwrap().unwrap();
    assert_eq!(now.metadata(), "beta");
    assert!(now.fencing_token() > held.fencing_token());

    // The holder learns it at its next renewal (every 300 ms), with why.
    assert!(held.wait_lost(Duration::from_secs(5)), "not told");
    assert_eq!(
        held.lost_reason().as_deref(),
        Some("broken by an operator: stuck since 3 a.m.")
    );
    let next = waiting.join().unwrap().unwrap();
    assert!(next.fencing_token() > held.fencing_token());
    next.ensure_held().unwrap();
    assert!(held.unlock().is_err());
    next.unlock().unwrap();
}

#[test]
fn breaking_a_permit_and_read_write_holds_hands_them_on() {
    let server = Server::start();
    let prefix = key("breakall");
    let (a, b) = (
        locker(&server, &prefix, "alpha"),
        locker(&server, &prefix, "beta"),
    );

    // A permit, with a waiter for it.
    let sem_a = a.semaphore("slots", 1).unwrap();
    let permit = sem_a.acquire().unwrap();
    let (waiting, name) = permit_behind(&a, &b, "slots");
    let broken = a.break_lock(&name, "drain").unwrap().unwrap();
    assert_eq!(broken.fencing_token(), permit.fencing_token());
    assert!(permit.wait_lost(Duration::from_secs(5)));
    assert_eq!(
        permit.lost_reason().as_deref(),
        Some("broken by an operator: drain")
    );
    let next = waiting.join().unwrap().unwrap();
    assert!(next.fencing_token() > permit.fencing_token());
    drop(next);

    // A read hold, with a writer waiting: the writer gets in.
    let rw_a = a.rwlock("cfg").unwrap();
    let read = rw_a.read().unwrap();
    let writing = {
        let rw_b = b.rwlock("cfg").unwrap();
        std::thread::spawn(move || rw_b.write_timeout(Duration::from_secs(30)))
    };
    let read_key = a
        .locks()
        .unwrap()
        .iter()
        .find(|i| i.kind() == LockKind::Read)
        .unwrap()
        .key()
        .to_owned();
    until_waiters(&a, &read_key, 1);
    a.break_lock(&read_key, "bad reader").unwrap().unwrap();
    assert!(read.wait_lost(Duration::from_secs(5)));
    assert_eq!(
        read.lost_reason().as_deref(),
        Some("broken by an operator: bad reader")
    );
    let writer = writing.join().unwrap().unwrap();
    assert!(writer.fencing_token() > read.fencing_token());

    // The write hold, with a reader waiting: the reader gets in.
    let reading = {
        let rw_a = a.rwlock("cfg").unwrap();
        std::thread::spawn(move || rw_a.read_timeout(Duration::from_secs(30)))
    };
    until_waiters(&a, "__redmutex__:rw-write:cfg", 1);
    a.break_lock("__redmutex__:rw-write:cfg", "bad writer")
        .unwrap()
        .unwrap();
    assert!(writer.wait_lost(Duration::from_secs(5)));
    assert_eq!(
        writer.lost_reason().as_deref(),
        Some("broken by an operator: bad writer")
    );
    let reader = reading.join().unwrap().unwrap();
    assert!(reader.fencing_token() > writer.fencing_token());
}

#[test]
fn breaking_a_free_key_changes_nothing() {
    let server = Server::start();
    let prefix = key("free");
    let a = locker(&server, &prefix, "alpha");
    drop(a.lock("k").unwrap());
    let before = dump(&server);
    assert_eq!(a.break_lock("k", "nothing").unwrap(), None);
    assert_eq!(
        a.break_lock("__redmutex__:permit:0:none", "x").unwrap(),
        None
    );
    assert_eq!(dump(&server), before);
    // A name that no hold can have is refused.
    assert!(a.break_lock("", "x").is_err());
    assert!(a.break_lock("__redmutex__:fence", "x").is_err());
    assert!(a.break_lock("k", "").is_err());
}

#[test]
fn the_audit_stream_holds_each_break_and_optionally_grants_and_releases() {
    let server = Server::start();
    let prefix = key("audit");
    let quiet = locker(&server, &prefix, "alpha");
    let start = SystemTime::now() - Duration::from_secs(1);
    let g = quiet.lock("a").unwrap();
    let token = g.fencing_token();
    quiet.break_lock("a", "first").unwrap().unwrap();
    drop(g);
    let log = quiet.audit(None).unwrap();
    assert_eq!(log.len(), 1, "{log:?}");
    let e = &log[0];
    assert_eq!(e.action(), "break");
    assert_eq!(e.key(), "a");
    assert_eq!(e.kind(), LockKind::Lock);
    assert_eq!(e.metadata(), "alpha");
    assert_eq!(e.fencing_token(), token);
    assert_eq!(e.reason(), "first");
    assert!(e.time() >= start && e.time() <= SystemTime::now() + Duration::from_secs(5));

    // With audit on: grants and releases too.
    let loud = server
        .builder()
        .prefix(&prefix)
        .metadata("loud")
        .audit(true)
        .build()
        .unwrap();
    let g = loud.lock("b").unwrap();
    let t = g.fencing_token();
    g.unlock().unwrap();
    let log = loud.audit(None).unwrap();
    let actions: Vec<(&str, &str, u64)> = log
        .iter()
        .map(|e| (e.action(), e.key(), e.fencing_token()))
        .collect();
    assert_eq!(
        actions,
        [
            ("break", "a", token),
            ("grant", "b", t),
            ("release", "b", t)
        ]
    );
    // `since` leaves out what came before (its millisecond included).
    let later = log[2].time();
    let tail = loud.audit(Some(later)).unwrap();
    assert!(tail.iter().all(|e| e.time() >= later), "{tail:?}");
    assert_eq!(tail.last().unwrap().action(), "release");
    assert!(loud
        .audit(Some(SystemTime::now() + Duration::from_secs(60)))
        .unwrap()
        .is_empty());
}

#[test]
fn a_broken_redlock_holder_learns_it_and_does_not_put_the_keys_back() {
    let masters = servers(3);
    let locker = redlock_builder(&masters)
        .metadata("alpha")
        .ttl(Duration::from_millis(900))
        .build()
        .unwrap();
    let k = key("redlock-break");
    let held = locker.lock(&k).unwrap();
    assert_eq!(locker.locks().unwrap().len(), 1);
    let was = locker.break_lock(&k, "moved host").unwrap().unwrap();
    assert_eq!(was.fencing_token(), held.fencing_token());
    // Its renewals would put back a key missing on a master: not a broken one.
    assert!(held.wait_lost(Duration::from_secs(5)), "not told");
    assert_eq!(
        held.lost_reason().as_deref(),
        Some("broken by an operator: moved host")
    );
    assert_eq!(holders_of(&masters, &k), 0, "the keys were put back");
    let next = locker.lock(&k).unwrap();
    assert!(next.fencing_token() > held.fencing_token());
}

#[test]
fn an_audit_trail_that_cannot_be_written_fails_no_lock_operation() {
    let server = Server::start();
    // A user that may do everything but write a stream.
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("noaudit")
        .arg(&["on", ">secret", "~*", "&*", "+@all", "-xadd"][..])
        .exec(&mut server.conn())
        .unwrap();
    let url = format!("redis://noaudit:secret@127.0.0.1:{}/", server.port());
    let locker = Locker::builder(redmutex::pool(&url).unwrap())
        .prefix(key("noaudit"))
        .ttl(Duration::from_millis(900))
        .audit(true)
        .build()
        .unwrap();
    let g = locker.lock("k").unwrap();
    g.unlock().unwrap();
    let g = locker.lock("k").unwrap();
    assert!(locker.break_lock("k", "still breaks").unwrap().is_some());
    assert!(g.wait_lost(Duration::from_secs(5)));
    assert!(locker.audit(None).unwrap().is_empty());
}

/// The port of the cluster node that serves `key`'s slot.
fn node_of(cluster: &Cluster, key: &str) -> u16 {
    let mut c = redis::Client::open(cluster.urls()[0].as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut c)
        .unwrap();
    let ranges: Vec<(i64, i64, (String, i64))> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query::<Vec<redis::Value>>(&mut c)
        .unwrap()
        .into_iter()
        .map(|r| {
            let redis::Value::Array(parts) = r else {
                panic!("{r:?}")
            };
            let int = |v: &redis::Value| redis::from_redis_value::<i64>(v.clone()).unwrap();
            let redis::Value::Array(master) = &parts[2] else {
                panic!("{parts:?}")
            };
            let host: String = redis::from_redis_value(master[0].clone()).unwrap();
            (int(&parts[0]), int(&parts[1]), (host, int(&master[1])))
        })
        .collect();
    let (.., (_, port)) = ranges
        .iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .unwrap();
    u16::try_from(*port).unwrap()
}

#[test]
fn an_audit_trail_on_a_hung_node_blocks_no_lock_operation_on_another() {
    // On a Cluster the audit stream lives in one slot, so on one node; the
    // locks live everywhere. With the audit on, a lock whose keys are on a
    // healthy node must be taken and released as fast as with it off while
    // the stream's node hangs (SIGSTOP): "it must never block or fail a
    // lock operation".
    let cluster = Cluster::start();
    let prefix = "hungaudit";
    let build = |audit| {
        Locker::builder(cluster.pool())
            .prefix(prefix)
            .io_timeout(Duration::from_secs(1))
            .audit(audit)
            .build()
            .unwrap()
    };
    let stream = node_of(&cluster, &format!("{prefix}:__redmutex__:audit"));
    let tag = (0..)
        .map(|i| format!("{{t{i}}}"))
        .find(|t| node_of(&cluster, &format!("{prefix}:{t}")) != stream)
        .unwrap();
    let keys: Vec<String> = (0..4).map(|i| format!("{tag}:{i}")).collect();
    let (on, off) = (build(true), build(false));
    for l in [&on, &off] {
        l.lock_all(&keys).unwrap().unlock().unwrap();
    }
    let node = cluster.nodes.iter().find(|n| n.port() == stream).unwrap();
    let signal = |sig: &str| {
        assert!(std::process::Command::new("kill")
            .args([sig, &node.pid().to_string()])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP");
    let cycle = |l: &Locker| {
        common::timed(|| {
            let g = l.lock_all(&keys).unwrap();
            let held = g.ensure_held().is_ok();
            drop(g);
            held
        })
    };
    let (held_off, without) = cycle(&off);
    let (held_on, with) = cycle(&on);
    signal("-CONT");
    assert!(
        held_off && held_on,
        "granted guards are held: off {held_off} in {without:?}, on {held_on} in {with:?}"
    );
    assert!(
        with < Duration::from_secs(1),
        "a lock and its release took {with:?} with the audit on (the stream's node hung), \
         {without:?} with it off"
    );
}

#[test]
fn a_listing_costs_a_round_trip_per_hold_not_per_key_of_the_database() {
    // `Locker::locks` documents its cost as `N / 500` walk steps, "then one
    // round trip (one script) per hold found". Without a prefix, an
    // application's own string keys (a cache, say) are walked too: they
    // must not cost a script each.
    let server = Server::start();
    let mut c = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.set(format!("cache:{i}"), "plain value").ignore();
    }
    pipe.exec(&mut c).unwrap();
    let locker = server.locker();
    let _held = locker.lock(key("held")).unwrap();
    let before = server.evalsha_calls();
    let list = locker.locks().unwrap();
    let scripts = server.evalsha_calls() - before;
    assert_eq!(list.len(), 1, "{list:?}");
    assert!(
        scripts <= 10,
        "{scripts} scripts to list 1 hold among 1,000 other string keys"
    );
}

#[test]
fn breaking_a_key_redmutex_did_not_write_leaves_it_and_the_counter_alone() {
    // `break_lock` promises to leave a key redmutex did not write as it is
    // (an error says so). An application's own value that only looks a
    // little like a lock's (`<hex>:<digits>:...`, but not a 32-digit owner
    // token) is such a key: it must be neither deleted nor counted.
    let server = Server::start();
    let prefix = key("foreign");
    let a = locker(&server, &prefix, "alpha");
    drop(a.lock("k").unwrap());
    let mut c = server.conn();
    let values = [
        ("cache", "cafe:99999999999999999:payload"),
        ("huge", "ab:100000000000000000000000000:x"),
    ];
    for (name, value) in values {
        redis::cmd("SET")
            .arg(format!("{prefix}:{name}"))
            .arg(value)
            .exec(&mut c)
            .unwrap();
        let before = dump(&server);
        let result = a.break_lock(name, "not a lock");
        assert!(
            matches!(result, Err(redmutex::Error::InvalidInput(_))),
            "{name}: {result:?}"
        );
        assert_eq!(dump(&server), before, "{name}: something changed");
    }
    // And the counter is not pushed up by the foreign digits (past u64, a
    // counter INCR cannot raise would fail every later grant).
    assert!(a.lock("k").unwrap().fencing_token() < 99_999_999_999_999_999);
}

#[test]
fn a_listing_shows_an_elections_leader() {
    let server = Server::start();
    let prefix = key("leader");
    let a = locker(&server, &prefix, "alpha");
    let election = a.election("primary").unwrap();
    let _leading = election.campaign("node-1").unwrap();
    let list = a.locks().unwrap();
    assert!(
        list.iter().any(|i| i.name() == "primary"),
        "the leader of 'primary' is not listed: {list:?}"
    );
}

#[test]
fn a_break_returns_the_hold_with_the_waiters_it_had() {
    // `break_lock` returns "the hold as it was", a `LockInfo` as `locks()`
    // lists it: with its live waiters (the command's `break` prints their
    // number), not an empty list.
    let server = Server::start();
    let prefix = key("breakwaiters");
    let (a, b) = (
        locker(&server, &prefix, "alpha"),
        locker(&server, &prefix, "beta"),
    );
    let held = a.lock("job").unwrap();
    let waiting = lock_behind(&a, &b, "job");
    let broken = a.break_lock("job", "stuck").unwrap().unwrap();
    assert_eq!(broken.waiters(), ["beta"], "{broken:?}");
    drop(waiting.join().unwrap().unwrap());
    drop(held);

    let sem = a.semaphore("slots", 1).unwrap();
    let permit = sem.acquire().unwrap();
    let (waiting, name) = permit_behind(&a, &b, "slots");
    let broken = a.break_lock(&name, "drain").unwrap().unwrap();
    assert_eq!(broken.waiters(), ["beta"], "{broken:?}");
    drop(waiting.join().unwrap().unwrap());
    drop(permit);
}

#[test]
fn a_break_frees_the_hold_at_once_whatever_the_holders_lock_delay() {
    // One rule for a break, with a waiter queued or not: it frees the hold
    // at once, as a release does (an operator's override; lock-delay does
    // not cover it). Before, the broken holder's lock-delay mark stayed:
    // with nobody queued, the lock stayed unavailable for its TTL plus the
    // delay, while a queued waiter was handed it at once.
    let server = Server::start();
    let prefix = key("breakdelay");
    let delaying = server
        .builder()
        .prefix(&prefix)
        .metadata("alpha")
        .ttl(Duration::from_secs(30))
        .lock_delay(Duration::from_secs(60))
        .build()
        .unwrap();
    let other = locker(&server, &prefix, "beta");

    // A lock, nobody queued.
    let held = delaying.lock("job").unwrap();
    delaying.break_lock("job", "stuck").unwrap().unwrap();
    let next = other.try_lock("job").unwrap();
    assert!(next.is_some(), "the broken lock is still kept by its delay");
    drop(next);
    drop(held);

    // A lock with a waiter queued: handed over at once (as before).
    let held = delaying.lock("queued").unwrap();
    let waiting = lock_behind(&delaying, &other, "queued");
    delaying.break_lock("queued", "stuck").unwrap().unwrap();
    drop(waiting.join().unwrap().unwrap());
    drop(held);

    // A permit and a write hold, nobody queued.
    let permit = delaying.semaphore("slots", 1).unwrap().acquire().unwrap();
    delaying
        .break_lock("__redmutex__:permit:0:slots", "stuck")
        .unwrap()
        .unwrap();
    let next = other.semaphore("slots", 1).unwrap().try_acquire().unwrap();
    assert!(
        next.is_some(),
        "the broken permit is still kept by its delay"
    );
    drop((next, permit));
    let write = delaying.rwlock("cfg").unwrap().write().unwrap();
    delaying
        .break_lock("__redmutex__:rw-write:cfg", "stuck")
        .unwrap()
        .unwrap();
    let next = other.rwlock("cfg").unwrap().try_write().unwrap();
    assert!(
        next.is_some(),
        "the broken write hold is still kept by its delay"
    );
    drop((next, write));
}

#[test]
fn on_a_cluster_a_break_hands_the_hold_to_the_first_waiter_as_a_release_does() {
    // A break frees a hold "as its holder's release would: the key is
    // handed to the first live waiter (or deleted and announced)", and a
    // broken leader's observers "see the next candidate lead ... at once".
    // On a Cluster a release hands over on the slot's shard channel; the
    // break announced on no channel at all (the locker's single-server
    // channel, which a Cluster has not), so it handed nothing over and
    // told nobody: the waiter came back at its next call (about a second
    // here), the candidate after "no leader".
    let cluster = Cluster::start();
    let prefix = key("cluster-break-hands");
    // Each as another process; a waiter calls only to keep its place (once
    // a second), so a hand-over reaches it by its news.
    let locker = |metadata: &str| {
        Locker::builder(cluster.pool())
            .prefix(&prefix)
            .metadata(metadata)
            .backoff(redmutex::Backoff::fixed(Duration::from_secs(60)))
            .build()
            .unwrap()
    };
    let (a, b) = (locker("alpha"), locker("beta"));
    let held = a.lock("job").unwrap();
    let waiting = lock_behind(&a, &b, "job");
    a.break_lock("job", "stuck").unwrap().unwrap();
    let next = a.holder("job").unwrap().map(|i| i.metadata().to_owned());
    assert_eq!(
        next.as_deref(),
        Some("beta"),
        "not handed over by the break"
    );
    drop(waiting.join().unwrap().unwrap());
    drop(held);

    let leading = a.election("primary").unwrap().campaign("node-1").unwrap();
    let candidate = {
        let election = b.election("primary").unwrap();
        std::thread::spawn(move || election.campaign_timeout("node-2", Duration::from_secs(30)))
    };
    let name = "__redmutex__:election:primary";
    until_waiters(&a, name, 1);
    a.break_lock(name, "stuck").unwrap().unwrap();
    let next = a.holder(name).unwrap().map(|i| i.metadata().to_owned());
    assert_eq!(
        next.as_deref(),
        Some("node-2"),
        "not handed over by the break"
    );
    drop(candidate.join().unwrap().unwrap());
    drop(leading);
}

#[test]
fn a_lock_of_a_nested_prefix_listed_by_the_outer_one_is_broken_as_its_own_prefix_would() {
    let server = Server::start();
    let outer = key("nested");
    let inner = server
        .builder()
        .prefix(format!("{outer}:team"))
        .ttl(Duration::from_secs(30))
        .lock_delay(Duration::from_secs(60))
        .build()
        .unwrap();
    let operator = server.builder().prefix(&outer).build().unwrap();
    let held = inner.lock("job").unwrap();
    assert_eq!(common::listed_keys(&operator), ["team:job"]);
    operator
        .break_lock("team:job", "stuck")
        .unwrap()
        .expect("the listed hold");
    // Another thread's (this one holds `held`, not known lost yet).
    let next = common::elsewhere(|| inner.try_lock("job").unwrap());
    assert!(next.is_some(), "the broken lock is still kept by its delay");
    let mut write = redis::pipe();
    write.set(key("nested-app"), 1);
    assert!(held.run_if_held(&write).is_err());
    assert_eq!(
        held.lost_reason().as_deref(),
        Some("broken by an operator: stuck")
    );
}
