//! Lock-delay (`Builder::lock_delay`): after a lease ends without a release
//! (its key expired, or was deleted), nobody is granted that key until the
//! delay has passed after the moment the lease was due to end, measured by
//! the server's clock (the key's expiry time before, the grant's key
//! written after, both read as `TIME` plus `PTTL` in one script: Redis 6.2,
//! which CI runs too, has no `PEXPIRETIME`); a clean release frees it at once; waiters keep their
//! order through the delay; a permit, a writer, several keys, a Cluster,
//! Sentinel and Redlock too.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{key, queue_keys, redlock_builder, servers, wait_until, Server};
use redis::Commands;
use redmutex::{Backoff, Error, Guard, Locker};

const TTL: Duration = Duration::from_millis(800);
const DELAY: Duration = Duration::from_millis(1500);
/// Generous: how late after the delay's end a waiter may be granted on a
/// loaded machine. Its backoff is a minute, so polling could not make it.
const LATE_MS: i64 = 2500;

/// A locker whose holders vanish: no watchdog, lease `TTL`, lock-delay
/// `DELAY`.
fn delaying(server: &Server) -> Locker {
    server
        .builder()
        .ttl(TTL)
        .watchdog(false)
        .lock_delay(DELAY)
        .build()
        .unwrap()
}

/// A waiter that only a reply or a release brings back: a minute of
/// backoff, no lock-delay of its own, no watchdog (its key's expiry time
/// stays the grant's time plus its TTL).
fn waiter(server: &Server) -> Locker {
    server
        .builder()
        .ttl(Duration::from_secs(60))
        .watchdog(false)
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap()
}

/// When `KEYS[1]` is due to expire, in ms by the server's clock: `PTTL`
/// read between two `TIME`s of the same millisecond (retried until they
/// are), so the sum is exact whatever the millisecond boundaries; a
/// negative `PTTL` (no key, no expiry) is returned as it is. Works on Redis
/// 6.2, which has no `PEXPIRETIME`.
const EXPIRES_AT: &str = r"
local function ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
for _ = 1, 1000 do
  local before = ms()
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < 0 then return ttl end
  if ms() == before then return before + ttl end
end
return redis.error_reply('TIME kept crossing a millisecond')
";

/// When `key` is due to expire, in ms by the server's clock.
fn expires_at(server: &Server, key: &str) -> i64 {
    expires_at_on(&mut server.conn(), key)
}

/// [`expires_at`] on any connection (a Cluster's routes by the key).
fn expires_at_on(conn: &mut impl redis::ConnectionLike, key: &str) -> i64 {
    redis::Script::new(EXPIRES_AT)
        .key(key)
        .invoke(conn)
        .unwrap()
}

/// When a key of `waiter`'s (TTL a minute, no watchdog) was granted, by the
/// server's clock: its expiry time less its TTL.
fn granted_at(server: &Server, key: &str) -> i64 {
    let at = expires_at(server, key);
    assert!(at > 0, "{key} has no expiry ({at})");
    at - 60_000
}

/// A holder that vanishes without releasing: its guard is leaked.
fn vanish(guard: Guard) {
    std::mem::forget(guard);
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap()
}

#[test]
fn an_expired_lease_delays_the_next_grant_by_the_server_clock() {
    let server = Server::start();
    let k = key("delay-expired");
    let holder = delaying(&server).lock(&k).unwrap();
    let ended = expires_at(&server, &k);
    vanish(holder);
    let next = waiter(&server)
        .lock_timeout(&k, Duration::from_secs(30))
        .unwrap();
    let at = granted_at(&server, &k);
    assert!(
        at >= ended + ms(DELAY),
        "granted at {at}, {} ms after the lease ended (delay {DELAY:?})",
        at - ended
    );
    // Come back when the delay ends, not at the minute of backoff.
    assert!(
        at - (ended + ms(DELAY)) < LATE_MS,
        "granted {} ms late",
        at - ended - ms(DELAY)
    );
    // The fencing token is minted from the server's clock (µs) too.
    let fence_ms = i64::try_from(next.fencing_token() / 1000).unwrap();
    assert!(fence_ms >= ended + ms(DELAY), "token {fence_ms} ms");
    next.unlock().unwrap();
}

#[test]
fn try_lock_is_refused_through_the_delay() {
    let server = Server::start();
    let k = key("delay-try");
    let holder = delaying(&server).lock(&k).unwrap();
    let ended = expires_at(&server, &k);
    vanish(holder);
    let other = server.locker();
    wait_until("the key to expire", Duration::from_secs(10), || {
        !server.conn().exists::<_, bool>(&k).unwrap()
    });
    assert!(
        other.try_lock(&k).unwrap().is_none(),
        "granted inside the delay"
    );
    // A deleted key (an operator's DEL, an eviction) delays as well.
    let k2 = key("delay-deleted");
    let holder = delaying(&server).lock(&k2).unwrap();
    let _: () = server.conn().del(&k2).unwrap();
    vanish(holder);
    assert!(
        other.try_lock(&k2).unwrap().is_none(),
        "granted after a DEL"
    );
    let g = waiter(&server)
        .lock_timeout(&k, Duration::from_secs(30))
        .unwrap();
    assert!(granted_at(&server, &k) >= ended + ms(DELAY));
    g.unlock().unwrap();
}

#[test]
fn a_clean_release_frees_at_once() {
    let server = Server::start();
    let locker = server
        .builder()
        .lock_delay(Duration::from_secs(3600))
        .build()
        .unwrap();
    let other = server.locker();
    let k = key("delay-released");
    locker.lock(&k).unwrap().unlock().unwrap();
    other
        .try_lock(&k)
        .unwrap()
        .expect("free at once after unlock")
        .unlock()
        .unwrap();
    drop(locker.lock(&k).unwrap());
    other
        .try_lock(&k)
        .unwrap()
        .expect("free at once after drop")
        .unlock()
        .unwrap();
    // Held again after the delaying holder's release: renewed (the
    // watchdog), then released, still nothing in the way.
    let g = locker.lock(&k).unwrap();
    g.extend(Duration::from_secs(5)).unwrap();
    g.unlock().unwrap();
    other
        .try_lock(&k)
        .unwrap()
        .expect("free after extend and unlock")
        .unlock()
        .unwrap();
}

#[test]
fn waiters_keep_their_order_through_the_delay() {
    let server = Server::start();
    let k = key("delay-order");
    let (queue, _) = queue_keys(None, &k);
    let holder = delaying(&server).lock(&k).unwrap();
    let ended = expires_at(&server, &k);
    vanish(holder);
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..3 {
        let (locker, order) = (waiter(&server), Arc::clone(&order));
        let k2 = k.clone();
        threads.push(std::thread::spawn(move || {
            let g = locker.lock_timeout(&k2, Duration::from_secs(60)).unwrap();
            order.lock().unwrap().push((i, g.fencing_token()));
            g.unlock().unwrap();
        }));
        // Each one queued before the next starts.
        wait_until("the waiter to queue", Duration::from_secs(10), || {
            server.conn().zcard::<_, usize>(&queue).unwrap() == i + 1
        });
    }
    for t in threads {
        t.join().unwrap();
    }
    let order = order.lock().unwrap().clone();
    let who: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(who, vec![0, 1, 2], "granted out of order");
    let first_ms = i64::try_from(order[0].1 / 1000).unwrap();
    assert!(
        first_ms >= ended + ms(DELAY),
        "first grant inside the delay"
    );
}

#[test]
fn a_permit_is_delayed_too() {
    let server = Server::start();
    let name = key("delay-permit");
    let permit_key = format!("__redmutex__:permit:0:{name}");
    let holder = delaying(&server)
        .semaphore(&name, 1)
        .unwrap()
        .acquire()
        .unwrap();
    let ended = expires_at(&server, &permit_key);
    vanish(holder);
    let sem = waiter(&server).semaphore(&name, 1).unwrap();
    let next = sem.acquire_timeout(Duration::from_secs(30)).unwrap();
    let at = granted_at(&server, &permit_key);
    assert!(
        at >= ended + ms(DELAY),
        "permit granted {} ms after",
        at - ended
    );
    assert!(at - (ended + ms(DELAY)) < LATE_MS);
    next.unlock().unwrap();
    // A released permit is free at once.
    let g = delaying(&server)
        .semaphore(&name, 1)
        .unwrap()
        .acquire()
        .unwrap();
    g.unlock().unwrap();
    sem.try_acquire()
        .unwrap()
        .expect("released permit")
        .unlock()
        .unwrap();
}

#[test]
fn a_writer_and_a_reader_are_delayed_too() {
    let server = Server::start();
    let name = key("delay-rw");
    let writer_key = format!("__redmutex__:rw-write:{name}");
    // A writer that vanishes delays the readers.
    let holder = delaying(&server).rwlock(&name).unwrap().write().unwrap();
    let ended = expires_at(&server, &writer_key);
    vanish(holder);
    let rw = waiter(&server).rwlock(&name).unwrap();
    let reader = rw.read_timeout(Duration::from_secs(30)).unwrap();
    let fence_ms = i64::try_from(reader.fencing_token() / 1000).unwrap();
    assert!(
        fence_ms >= ended + ms(DELAY),
        "read granted {} ms after",
        fence_ms - ended
    );
    reader.unlock().unwrap();
    // A reader that vanishes delays the next writer.
    let holder = delaying(&server).rwlock(&name).unwrap().read().unwrap();
    let read_keys: Vec<String> = server
        .conn()
        .keys(format!("__redmutex__:rw-read:*:{name}"))
        .unwrap();
    assert_eq!(read_keys.len(), 1);
    let ended = expires_at(&server, &read_keys[0]);
    vanish(holder);
    let writer = rw.write_timeout(Duration::from_secs(30)).unwrap();
    let at = granted_at(&server, &writer_key);
    assert!(
        at >= ended + ms(DELAY),
        "write granted {} ms after",
        at - ended
    );
    assert!(at - (ended + ms(DELAY)) < LATE_MS);
    writer.unlock().unwrap();
    // A released writer frees at once.
    let w = delaying(&server).rwlock(&name).unwrap().write().unwrap();
    w.unlock().unwrap();
    rw.try_read()
        .unwrap()
        .expect("free after the writer's release")
        .unlock()
        .unwrap();
}

#[test]
fn redlock_delays_on_each_master() {
    let servers = servers(3);
    let k = key("delay-redlock");
    let holder = redlock_builder(&servers)
        .ttl(TTL)
        .watchdog(false)
        .lock_delay(DELAY)
        .build()
        .unwrap()
        .lock(&k)
        .unwrap();
    let ended: Vec<i64> = servers.iter().map(|s| expires_at(s, &k)).collect();
    vanish(holder);
    let next = redlock_builder(&servers)
        .ttl(Duration::from_secs(60))
        .watchdog(false)
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap()
        .lock_timeout(&k, Duration::from_secs(30))
        .unwrap();
    // A master whose own delay had not ended when a majority granted (its
    // lease ended a little later than theirs) keeps the key missing: the
    // grant stands on the others, which must be a majority.
    let mut granted = 0;
    for (s, ended) in servers.iter().zip(ended) {
        if expires_at(s, &k) < 0 {
            continue;
        }
        granted += 1;
        let at = granted_at(s, &k);
        assert!(
            at >= ended + ms(DELAY),
            "granted {} ms after on a master",
            at - ended
        );
    }
    assert!(granted >= 2, "granted on {granted} masters of 3");
    next.unlock().unwrap();
}

#[test]
fn an_absurd_delay_is_refused() {
    let server = Server::start();
    let bad = server
        .builder()
        .lock_delay(redmutex::MAX_TTL + Duration::from_millis(1))
        .build();
    assert!(matches!(bad, Err(Error::InvalidInput(_))));
    assert!(server
        .builder()
        .lock_delay(redmutex::MAX_TTL)
        .build()
        .is_ok());
}

#[test]
fn a_lock_on_several_keys_delays_each_of_them() {
    let server = Server::start();
    let (a, b) = (key("delay-multi-a"), key("delay-multi-b"));
    let holder = delaying(&server).lock_all([&a, &b]).unwrap();
    let ended = expires_at(&server, &b);
    vanish(holder);
    // A lock on one of them alone sees the delay of the lock on both.
    let next = waiter(&server)
        .lock_timeout(&b, Duration::from_secs(30))
        .unwrap();
    assert!(granted_at(&server, &b) >= ended + ms(DELAY));
    next.unlock().unwrap();
}

#[test]
fn a_cluster_delays_in_the_lock_keys_slot() {
    let cluster = common::Cluster::start();
    let k = key("delay-cluster");
    let expires = |k: &str| -> i64 {
        let mut c = cluster.pool().get_timeout(Duration::from_secs(10)).unwrap();
        expires_at_on(&mut *c, k)
    };
    let holder = Locker::builder(cluster.pool())
        .ttl(TTL)
        .watchdog(false)
        .lock_delay(DELAY)
        .build()
        .unwrap();
    let sem_holder = holder.semaphore(&k, 1).unwrap().acquire().unwrap();
    let g = holder.lock(&k).unwrap();
    let ended = expires(&k);
    vanish(g);
    vanish(sem_holder);
    let next = Locker::builder(cluster.pool())
        .ttl(Duration::from_secs(60))
        .watchdog(false)
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap();
    let g = next.lock_timeout(&k, Duration::from_secs(30)).unwrap();
    let at = expires(&k) - 60_000;
    assert!(at >= ended + ms(DELAY), "granted {} ms after", at - ended);
    assert!(at - (ended + ms(DELAY)) < LATE_MS);
    g.unlock().unwrap();
    // The permit's marks share its slot too (no CROSSSLOT), and delay it.
    let sem = next.semaphore(&k, 1).unwrap();
    let p = sem.acquire_timeout(Duration::from_secs(30)).unwrap();
    p.unlock().unwrap();
}

#[test]
fn sentinel_delays_on_the_master_and_replicates_the_mark() {
    use redis::sentinel::{LockedSentinelClient, SentinelClient, SentinelServerType};
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let sentinels = common::Sentinels::watch(&master);
    let pool = || {
        let client = SentinelClient::build(
            sentinels.urls(),
            String::from("mymaster"),
            None,
            SentinelServerType::Master,
        )
        .unwrap();
        r2d2::Pool::builder()
            .max_size(4)
            .build(LockedSentinelClient::new(client))
            .unwrap()
    };
    let k = key("delay-sentinel");
    let holder = Locker::builder(pool())
        .ttl(TTL)
        .watchdog(false)
        .lock_delay(DELAY)
        .build()
        .unwrap()
        .lock(&k)
        .unwrap();
    let ended = expires_at(&master, &k);
    // The mark is written with the grant, so a replica has it as it has
    // the lock key.
    let marks = format!("__redmutex__:delay:{k}");
    wait_until("the mark on the replica", Duration::from_secs(10), || {
        replica.conn().hexists::<_, _, bool>(&marks, &k).unwrap()
    });
    vanish(holder);
    let next = Locker::builder(pool())
        .ttl(Duration::from_secs(60))
        .watchdog(false)
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap()
        .lock_timeout(&k, Duration::from_secs(30))
        .unwrap();
    let at = granted_at(&master, &k);
    assert!(at >= ended + ms(DELAY), "granted {} ms after", at - ended);
    next.unlock().unwrap();
}

#[test]
fn a_lock_on_several_keys_is_freed_at_once_by_its_release() {
    let server = Server::start();
    let locker = server
        .builder()
        .lock_delay(Duration::from_secs(3600))
        .build()
        .unwrap();
    let other = server.locker();
    for n in [2, 3] {
        let keys: Vec<String> = (0..n)
            .map(|i| key(&format!("delay-multi-{n}-{i}")))
            .collect();
        locker.lock_all(&keys).unwrap().unlock().unwrap();
        for k in &keys {
            other
                .try_lock(k)
                .unwrap()
                .unwrap_or_else(|| panic!("{k} of {n} not free after unlock"))
                .unlock()
                .unwrap();
        }
        drop(locker.lock_all(&keys).unwrap());
        for k in &keys {
            other
                .try_lock(k)
                .unwrap()
                .unwrap_or_else(|| panic!("{k} of {n} not free after drop"))
                .unlock()
                .unwrap();
        }
    }
}

/// A reader that vanished delays the writer even when another reader's
/// release, not the writer's own attempt, would let it in: that release
/// hands the writer key to the queued writer, which must not come before
/// the vanished reader's delay ends.
#[test]
fn a_readers_release_hands_no_writer_the_lock_inside_another_readers_delay() {
    let server = Server::start();
    let name = key("delay-rw-hand");
    let queue = format!("__redmutex__:rw-queue:{name}");
    let vanished = delaying(&server).rwlock(&name).unwrap().read().unwrap();
    let read_keys: Vec<String> = server
        .conn()
        .keys(format!("__redmutex__:rw-read:*:{name}"))
        .unwrap();
    assert_eq!(read_keys.len(), 1);
    let ended = expires_at(&server, &read_keys[0]);
    vanish(vanished);
    // Another reader, which releases cleanly, and a writer queued behind both.
    let staying = server.locker().rwlock(&name).unwrap().read().unwrap();
    let rw = waiter(&server).rwlock(&name).unwrap();
    let writer = std::thread::spawn(move || {
        let w = rw.write_timeout(Duration::from_secs(30)).unwrap();
        let fence = w.fencing_token();
        w.unlock().unwrap();
        fence
    });
    wait_until("the writer to queue", Duration::from_secs(10), || {
        server.conn().zcard::<_, usize>(&queue).unwrap() == 1
    });
    wait_until(
        "the vanished read hold to expire",
        Duration::from_secs(10),
        || !server.conn().exists::<_, bool>(&read_keys[0]).unwrap(),
    );
    staying.unlock().unwrap();
    // The fencing token is minted from the server's clock (µs) at the
    // grant, or at the hand-over.
    let at = i64::try_from(writer.join().unwrap() / 1000).unwrap();
    assert!(
        at >= ended + ms(DELAY),
        "write handed over {} ms after the vanished reader's lease ended (delay {DELAY:?})",
        at - ended
    );
}

/// The server's clock, in ms.
fn server_ms(server: &Server) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    s * 1000 + us / 1000
}

/// A mark outlives no delay: a read hold that vanished leaves its mark,
/// and other read holds that keep renewing theirs (each read hold has a
/// key, and a mark, of its own) must not keep it past its delay.
#[test]
fn a_vanished_readers_mark_goes_with_its_delay_while_others_renew() {
    let server = Server::start();
    let name = key("delay-rw-memory");
    let marks = format!("__redmutex__:rw-delay:{name}");
    let pattern = format!("__redmutex__:rw-read:*:{name}");
    let rw = delaying(&server).rwlock(&name).unwrap();
    let vanished = rw.read().unwrap();
    let read_keys: Vec<String> = server.conn().keys(&pattern).unwrap();
    let gone = read_keys[0].clone();
    let ended = expires_at(&server, &gone);
    vanish(vanished);
    // A reader that stays, renewing its own mark every third of its TTL.
    let staying = server
        .builder()
        .ttl(TTL)
        .lock_delay(DELAY)
        .build()
        .unwrap()
        .rwlock(&name)
        .unwrap()
        .read()
        .unwrap();
    let past = ended + ms(DELAY) + 3 * ms(TTL);
    wait_until(
        "the delay to pass, and renewals after",
        Duration::from_secs(30),
        || server_ms(&server) >= past,
    );
    assert!(!staying.is_lost());
    let left: bool = server.conn().hexists(&marks, &gone).unwrap();
    assert!(
        !left,
        "the vanished read hold's mark is still kept, {} ms after its delay ended",
        server_ms(&server) - ended - ms(DELAY)
    );
    staying.unlock().unwrap();
}

/// An acquire timeout shorter than the delay left: `Timeout` at the
/// timeout (not at the delay's end), its place in the queue left, and the
/// next waiter still granted at the delay's end.
#[test]
fn a_timeout_shorter_than_the_delay_gives_up_at_the_timeout() {
    let server = Server::start();
    let k = key("delay-timeout");
    let (queue, _) = queue_keys(None, &k);
    let holder = delaying(&server).lock(&k).unwrap();
    let ended = expires_at(&server, &k);
    vanish(holder);
    wait_until("the key to expire", Duration::from_secs(10), || {
        !server.conn().exists::<_, bool>(&k).unwrap()
    });
    let started = std::time::Instant::now();
    let short = waiter(&server).lock_timeout(&k, Duration::from_millis(100));
    let took = started.elapsed();
    assert!(matches!(short, Err(Error::Timeout { .. })), "{short:?}");
    // Well before the delay's end (1.5 s after the expiry).
    assert!(took < Duration::from_millis(1000), "gave up after {took:?}");
    let queued: usize = server.conn().zcard(&queue).unwrap();
    assert_eq!(queued, 0, "the timed-out waiter stayed queued");
    let g = waiter(&server)
        .lock_timeout(&k, Duration::from_secs(30))
        .unwrap();
    let at = granted_at(&server, &k);
    assert!(at >= ended + ms(DELAY));
    assert!(at - (ended + ms(DELAY)) < LATE_MS);
    g.unlock().unwrap();
}

/// Redlock's release of a lock on several keys with a lock-delay frees
/// every key on every master at once, too.
#[test]
fn redlock_frees_a_lock_on_several_keys_at_once() {
    let servers = servers(3);
    let locker = redlock_builder(&servers)
        .lock_delay(Duration::from_secs(3600))
        .build()
        .unwrap();
    let other = redlock_builder(&servers).build().unwrap();
    let keys = [key("delay-redlock-multi-a"), key("delay-redlock-multi-b")];
    locker.lock_all(&keys).unwrap().unlock().unwrap();
    drop(locker.lock_all(&keys).unwrap());
    other
        .try_lock_all(&keys)
        .unwrap()
        .expect("free at once after the release")
        .unlock()
        .unwrap();
}

/// An operator's break of one read hold frees the writer key as that
/// hold's release would: not to a writer while another, vanished read
/// hold's delay lasts.
#[test]
fn breaking_a_read_hold_hands_no_writer_the_lock_inside_another_readers_delay() {
    let server = Server::start();
    let name = key("delay-rw-break");
    let queue = format!("__redmutex__:rw-queue:{name}");
    let pattern = format!("__redmutex__:rw-read:*:{name}");
    let vanished = delaying(&server).rwlock(&name).unwrap().read().unwrap();
    let first: Vec<String> = server.conn().keys(&pattern).unwrap();
    let ended = expires_at(&server, &first[0]);
    vanish(vanished);
    let staying = server.locker().rwlock(&name).unwrap().read().unwrap();
    let all: Vec<String> = server.conn().keys(&pattern).unwrap();
    let other = all.into_iter().find(|k| *k != first[0]).unwrap();
    let rw = waiter(&server).rwlock(&name).unwrap();
    let writer = std::thread::spawn(move || {
        let w = rw.write_timeout(Duration::from_secs(30)).unwrap();
        let fence = w.fencing_token();
        w.unlock().unwrap();
        fence
    });
    wait_until("the writer to queue", Duration::from_secs(10), || {
        server.conn().zcard::<_, usize>(&queue).unwrap() == 1
    });
    wait_until(
        "the vanished read hold to expire",
        Duration::from_secs(10),
        || !server.conn().exists::<_, bool>(&first[0]).unwrap(),
    );
    server
        .locker()
        .break_lock(&other, "review: the staying reader is stuck")
        .unwrap()
        .expect("the staying reader's hold");
    let at = i64::try_from(writer.join().unwrap() / 1000).unwrap();
    assert!(
        at >= ended + ms(DELAY),
        "write handed over {} ms after the vanished reader's lease ended (delay {DELAY:?})",
        at - ended
    );
    drop(staying);
}
