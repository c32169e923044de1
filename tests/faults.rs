//! A dead or frozen server costs a bounded wait and an error, never a hang;
//! a flushed script cache costs nothing; a pool with r2d2's defaults works.
//!
//! The time bounds below are generous (several times the configured timeouts)
//! so that a loaded machine does not fail them; what they catch is a hang.
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{key, timed, Server};
use redmutex::{Error, Locker};
use redmutex_testkit::proxy::{Mode, Proxy};

const IO: Duration = Duration::from_millis(300);
const BOUND: Duration = Duration::from_secs(8);

#[allow(clippy::unwrap_used)] // a helper of the tests: failing loudly is the point
fn short_timeouts(server: &Server) -> Locker {
    server
        .builder()
        .ttl(Duration::from_secs(2))
        .io_timeout(IO)
        .checkout_timeout(IO)
        .build()
        .unwrap()
}

#[test]
fn a_killed_server_gives_errors_in_bounded_time() {
    let mut server = Server::start();
    let locker = short_timeouts(&server);
    let held = locker.lock(&key("held")).unwrap();
    let to_unlock = locker.lock(&key("unlock")).unwrap();
    server.kill();

    let (r, took) = timed(|| locker.lock(&key("other")));
    assert!(r.as_ref().unwrap_err().is_connection(), "{r:?}");
    assert!(took < BOUND, "lock took {took:?}");
    let (r, took) = timed(|| locker.try_lock(&key("other")));
    assert!(r.as_ref().unwrap_err().is_connection(), "{r:?}");
    assert!(took < BOUND, "try_lock took {took:?}");
    let (r, took) = timed(|| locker.try_lock_all(&[&key("x"), &key("y")]));
    assert!(r.is_err() && took < BOUND, "{r:?} {took:?}");
    let (r, took) = timed(|| held.extend(Duration::from_secs(5)));
    assert!(r.as_ref().unwrap_err().is_connection(), "{r:?}");
    assert!(took < BOUND, "extend took {took:?}");
    let (r, took) = timed(|| locker.holder(&key("held")));
    assert!(r.is_err() && took < BOUND, "{r:?} {took:?}");
    let (r, took) = timed(|| to_unlock.unlock());
    assert!(r.is_err() && took < BOUND, "{r:?} {took:?}");
    // With no server to renew on, the lease is reported lost at its deadline.
    assert!(held.wait_lost(Duration::from_secs(20)));
    let ((), took) = timed(|| drop(held));
    assert!(took < BOUND, "drop took {took:?}");
}

#[test]
fn a_frozen_server_gives_errors_in_bounded_time() {
    let server = Server::start();
    let locker = short_timeouts(&server);
    let held = locker.lock(&key("held")).unwrap();
    let to_unlock = locker.lock(&key("unlock")).unwrap();
    server.pause();

    let (r, took) = timed(|| locker.try_lock(&key("other")));
    assert!(r.as_ref().unwrap_err().is_connection(), "{r:?}");
    assert!(took < BOUND, "try_lock took {took:?}");
    let (r, took) = timed(|| locker.lock(&key("other")));
    assert!(r.is_err() && took < BOUND, "{r:?} {took:?}");
    let (r, took) = timed(|| held.extend(Duration::from_secs(5)));
    assert!(r.is_err() && took < BOUND, "{r:?} {took:?}");
    let (r, took) = timed(|| to_unlock.unlock());
    assert!(r.is_err() && took < BOUND, "{r:?} {took:?}");
    assert!(
        held.wait_lost(Duration::from_secs(20)),
        "no renewal can be confirmed"
    );
    let ((), took) = timed(|| drop(held));
    assert!(took < BOUND, "drop took {took:?}");
    server.resume();
    // Once the server is back, locking works again.
    let g = locker
        .lock_timeout(&key("after"), Duration::from_secs(10))
        .unwrap();
    g.unlock().unwrap();
}

#[test]
fn a_flushed_script_cache_is_harmless() {
    let server = Server::start();
    let locker = server.locker_with_ttl(Duration::from_millis(300));
    let k = key("flush");
    let flush = || {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.conn())
            .unwrap();
    };
    flush();
    let g = locker.lock(&k).unwrap();
    flush();
    g.extend(Duration::from_millis(300)).unwrap();
    flush();
    assert!(locker.holder(&k).unwrap().is_some());
    flush();
    // The watchdog's next renewals reload the script too.
    let events = common::keyspace_events(&server, &k, "Kg");
    common::next_event(&events, "expire", Duration::from_secs(20));
    flush();
    common::next_event(&events, "expire", Duration::from_secs(20));
    g.ensure_held().unwrap();
    flush();
    g.unlock().unwrap();
    flush();
    assert!(locker.try_lock(&k).unwrap().is_some());
}

/// The script cache emptied over and over while calls run: a call whose
/// script was just loaded back may find the cache empty again by the time
/// it runs it. No call may fail for that (before 2026-11-23 one in a few
/// thousand did, as a NOSCRIPT error: a release that failed with no fault
/// under way, found by the fault suite's SCRIPT FLUSH scenario).
#[test]
fn a_script_cache_flushed_over_and_over_fails_no_call() {
    let server = Server::start();
    let locker = server.locker();
    let rw = locker.rwlock(&key("flush-rw")).unwrap();
    let sem = locker.semaphore(&key("flush-sem"), 2).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (stop, mut conn) = (Arc::clone(&stop), server.conn());
        std::thread::spawn(move || {
            let mut flushes = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
                flushes += 1;
            }
            flushes
        })
    };
    let k = key("flush-often");
    let mut failed = Vec::new();
    let mut note = |what: &str, r: Result<(), Error>| {
        if let Err(e) = r {
            failed.push(format!("{what}: {e}: {:?}", std::error::Error::source(&e)));
        }
    };
    for _ in 0..300 {
        note(
            "lock, extend, holder, unlock",
            locker.lock(&k).and_then(|g| {
                g.extend(Duration::from_secs(5))?;
                locker.holder(&k)?;
                g.unlock()
            }),
        );
        note("try_lock", locker.try_lock(&k).map(drop));
        note("read", rw.read().and_then(|g| g.unlock()));
        note("write", rw.write().and_then(|g| g.unlock()));
        note("permit", sem.acquire().and_then(|g| g.unlock()));
    }
    stop.store(true, Ordering::SeqCst);
    let flushes = flusher.join().unwrap();
    assert!(
        flushes > 100,
        "only {flushes} flushes: the test proves nothing"
    );
    assert!(
        failed.is_empty(),
        "{} of 1,800 calls failed over {flushes} flushes, e.g. {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
}

#[test]
fn a_pool_with_r2d2_defaults_works() {
    let server = Server::start();
    let pool = r2d2::Pool::builder()
        .max_size(2)
        .build(redis::Client::open(server.url()).unwrap())
        .unwrap();
    let locker = Locker::new(pool);
    let k = key("default-pool");
    let g = locker.lock(&k).unwrap();
    assert!(common::elsewhere(|| locker.try_lock(&k).unwrap().is_none()));
    g.unlock().unwrap();
}

#[test]
fn a_frozen_server_behind_a_default_pool_still_times_out() {
    // The locker gives the connections it uses a read timeout, so even a pool
    // that has none (and that pings at checkout) cannot hang on a stalled
    // server once the locker has used its connections.
    let server = Server::start();
    let pool = server.bare_pool(1);
    let locker = Locker::builder(pool)
        .io_timeout(IO)
        .checkout_timeout(IO)
        .build()
        .unwrap();
    locker
        .try_lock(&key("warm"))
        .unwrap()
        .unwrap()
        .unlock()
        .unwrap();
    server.pause();
    let (r, took) = timed(|| locker.try_lock(&key("frozen")));
    server.resume();
    assert!(r.is_err() && took < BOUND, "{r:?} {took:?}");
}

#[test]
fn a_lost_acquire_reply_leaves_no_orphan_lock() {
    // The server holds every command for a second (CLIENT PAUSE); the acquire
    // times out on the client, then runs when the pause ends. The release by
    // token that follows it on the same connection must remove it.
    let server = Server::start();
    let pool = server.bare_pool(1);
    let locker = Locker::builder(pool)
        .io_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let k = key("orphan");
    // Open the one connection and load the acquire script: a NOSCRIPT reply
    // after the pause would mean the acquire never ran, hiding the problem.
    drop(locker.try_lock(&key("warm-up")).unwrap().unwrap());
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("ALL")
        .query(&mut server.conn())
        .unwrap();
    let r = locker.try_lock(&k);
    assert!(
        matches!(&r, Err(Error::Redis(e)) if e.is_timeout()),
        "{r:?}"
    );
    // The next command on the same connection runs after the queued ones, and
    // must read its own reply, not a stale one.
    // Each call times out (200 ms) until the pause ends.
    let after = (0..50)
        .find_map(|_| locker.holder(&k).ok())
        .expect("the pause ends after a second");
    assert!(after.is_none(), "orphan lock left behind: {after:?}");
    assert!(locker.try_lock(&k).unwrap().is_some());
}

/// The server applies an acquire but its reply never arrives (the
/// connection is cut first): the lock must not stay behind until its TTL.
#[test]
fn a_cut_connection_after_an_acquire_leaves_no_orphan_lock() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let locker = Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .ttl(Duration::from_secs(60))
        .io_timeout(IO)
        .checkout_timeout(IO)
        .build()
        .unwrap();
    let k = key("orphan");
    // Load the script first: a NOSCRIPT reply would mean nothing ran.
    drop(locker.try_lock(&key("warm-up")).unwrap().unwrap());
    proxy.set(Mode::DropReplies);
    let r = locker.try_lock(&k);
    assert!(r.is_err(), "{r:?}");
    proxy.set(Mode::Pass);
    // The clean-up runs on a fresh connection, on a thread of its own:
    // within its timeouts, far from the 60 s TTL.
    common::wait_until("the lock is cleaned up", Duration::from_secs(10), || {
        redis::cmd("EXISTS")
            .arg(&k)
            .query::<bool>(&mut server.conn())
            .is_ok_and(|e| !e)
    });
    assert!(locker.try_lock(&k).unwrap().is_some());
}

/// A pool of 8 (big enough for a spare renewal connection) and a locker
/// over it with a TTL of 1.5 s.
#[allow(clippy::unwrap_used)] // a helper of the tests: failing loudly is the point
fn starvable(server: &Server) -> (r2d2::Pool<redis::Client>, Locker, Duration) {
    let pool = server.bare_pool(8);
    let ttl = Duration::from_millis(1500);
    let locker = Locker::builder(pool.clone())
        .ttl(ttl)
        .io_timeout(IO)
        .checkout_timeout(IO)
        .build()
        .unwrap();
    (pool, locker, ttl)
}

/// As above, while the server freezes long enough for a renewal to time
/// out, and the application takes every connection that comes free: the
/// connection set aside for renewals must stay with the locker, or the
/// application takes it and the lease runs out.
#[test]
fn a_lease_survives_a_renewal_timeout_in_a_starved_pool() {
    let server = Server::start();
    let (pool, locker, ttl) = starvable(&server);
    let guard = locker.lock(&key("starved")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let starver = {
        let (pool, stop) = (pool.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut taken = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(c) = pool.get_timeout(Duration::from_millis(20)) {
                    taken.push(c);
                }
            }
            taken.len()
        })
    };
    // The first renewal (a third of the TTL in) times out while frozen; the
    // lease still has 400 ms when the server comes back.
    server.pause();
    let back = guard.valid_until() - Duration::from_millis(400);
    common::wait_until("the server has been frozen long enough", ttl, || {
        Instant::now() >= back
    });
    server.resume();
    let lost = guard.wait_lost(ttl * 2);
    stop.store(true, Ordering::SeqCst);
    let taken = starver.join().unwrap();
    assert!(
        !lost,
        "the lease was lost to a starved pool ({taken} taken)"
    );
    guard.unlock().unwrap();
}

/// The application checks out every connection of the pool while it holds
/// a lock: the watchdog renews on the connection the locker set aside.
#[test]
fn a_lease_survives_an_application_holding_every_pooled_connection() {
    let server = Server::start();
    let (pool, locker, ttl) = starvable(&server);
    let guard = locker.lock(&key("starved")).unwrap();
    let taken: Vec<_> = std::iter::from_fn(|| pool.try_get()).collect();
    assert!(pool.try_get().is_none() && !taken.is_empty());
    assert!(
        !guard.wait_lost(ttl * 2),
        "the lease was lost to a starved pool"
    );
    drop(taken);
    guard.unlock().unwrap();
}

/// The bound the docs give for every call: the checkout timeout plus the
/// I/O timeout (twice that for the calls that end a guard's lease), with a
/// scheduling allowance for a loaded machine.
fn within(took: Duration, bound: Duration) -> bool {
    took < bound + Duration::from_millis(900)
}

/// A frozen server behind `redmutex::pool` with the default 2 s timeouts:
/// each call gives up within checkout + I/O timeout. (`try_lock` used to
/// wait for its clean-up too, twice, and took 6 s.)
#[test]
fn calls_on_a_frozen_server_return_within_the_documented_bound() {
    let server = Server::start();
    let locker = Locker::new(redmutex::pool(&server.url()).unwrap());
    let one = redmutex::DEFAULT_CHECKOUT_TIMEOUT + redmutex::DEFAULT_IO_TIMEOUT;
    // Connections open and scripts loaded, as in a running service.
    let guard = locker.lock(&key("held")).unwrap();
    drop(locker.try_lock(&key("warm-up")).unwrap());
    server.pause();
    let (r, took) = timed(|| locker.try_lock(&key("frozen")));
    assert!(
        r.is_err() && within(took, one),
        "try_lock: {r:?} after {took:?}"
    );
    let (r, took) = timed(|| locker.holder(&key("frozen")));
    assert!(
        r.is_err() && within(took, one),
        "holder: {r:?} after {took:?}"
    );
    let (r, took) = timed(|| locker.lock_timeout(&key("frozen"), Duration::from_millis(100)));
    assert!(
        r.is_err() && within(took, one + Duration::from_millis(100)),
        "lock_timeout: {r:?} after {took:?}"
    );
    let (_, took) = timed(|| drop(guard));
    assert!(within(took, one * 2), "drop took {took:?}");
    server.resume();
    // Once it answers again, the locker works as before.
    assert!(locker.try_lock(&key("after")).unwrap().is_some());
}

/// A half-open connection (a failed-over master, a NAT that dropped its
/// state): the existing connections stall, new ones work. A connection
/// that timed out is retired, so the lease renews on a fresh one and lock
/// calls go on working, instead of timing out until TCP gives up.
#[test]
fn a_half_open_connection_is_retired_after_a_timeout() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let ttl = Duration::from_secs(3);
    let locker = Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .ttl(ttl)
        .io_timeout(IO)
        .checkout_timeout(IO)
        .build()
        .unwrap();
    let guard = locker.lock(&key("half-open")).unwrap();
    // The spare renewal connection is in place after the first renewal.
    let first = guard.valid_until();
    common::wait_until("a first renewal", ttl * 2, || guard.valid_until() > first);
    proxy.set(Mode::StallExisting);
    assert!(
        !guard.wait_lost(ttl * 3),
        "the lease was lost to a half-open connection"
    );
    // Lock calls go on working too (at most one timeout each on the way).
    let other = (0..20).find_map(|_| locker.try_lock(&key("other")).ok());
    assert!(matches!(other, Some(Some(_))), "{other:?}");
    guard.unlock().unwrap();
}

/// Two lockers built on one pool with different I/O timeouts: each call is
/// bounded by its own locker's, whoever used a connection before. (The mark
/// that timeouts were set used to be per connection: locker B waited out
/// locker A's 3 s on a frozen server.)
#[test]
fn lockers_sharing_a_pool_keep_their_own_io_timeout() {
    let server = Server::start();
    // One connection: B gets the very connection A used.
    let pool = server.bare_pool(1);
    let slow = Locker::builder(pool.clone())
        .io_timeout(Duration::from_secs(3))
        .checkout_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let quick = Locker::builder(pool)
        .io_timeout(Duration::from_millis(200))
        .checkout_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    slow.try_lock(&key("warm"))
        .unwrap()
        .unwrap()
        .unlock()
        .unwrap();
    server.pause();
    let (r, took) = timed(|| quick.try_lock(&key("frozen")));
    server.resume();
    assert!(r.as_ref().is_err_and(Error::is_connection), "{r:?}");
    // 400 ms by its own bound, 3 s by the other locker's.
    assert!(
        took < Duration::from_millis(1500),
        "try_lock took {took:?} on a frozen server"
    );
}

/// As above with ten guards, whose renewals fall due at about the same
/// moments: they share the connection set aside for renewals, so the
/// application that holds every other one starves none of them. (A renewal
/// that found the spare busy used to go to the pool, and time out there:
/// 4 to 6 of the 10 leases were lost.)
#[test]
fn ten_leases_survive_an_application_holding_every_pooled_connection() {
    let server = Server::start();
    let (pool, locker, ttl) = starvable(&server);
    let guards: Vec<_> = (0..10)
        .map(|i| locker.lock(&key(&format!("starved-{i}"))).unwrap())
        .collect();
    let taken: Vec<_> = std::iter::from_fn(|| pool.try_get()).collect();
    assert!(pool.try_get().is_none() && !taken.is_empty());
    // Each lease renews about five times meanwhile.
    let end = Instant::now() + ttl * 2;
    let lost = guards
        .iter()
        .filter(|g| g.wait_lost(end.saturating_duration_since(Instant::now())))
        .count();
    drop(taken);
    assert_eq!(lost, 0, "leases lost to a starved pool, of 10");
    for g in guards {
        g.unlock().unwrap();
    }
}

/// The figure the crate docs give: 3,000 guards of one locker share the
/// connection set aside for renewals while the application holds every
/// other one. A measurement, run by hand:
/// `cargo test --all-features --test faults -- --ignored --nocapture thousands`.
#[test]
#[ignore = "a measurement: thousands of guards, run by hand"]
fn thousands_of_leases_share_the_renewal_connection() {
    let server = Server::start();
    let (pool, locker, ttl) = starvable(&server);
    let n = 3000;
    let (guards, took) = timed(|| {
        (0..n)
            .map(|i| locker.lock(&key(&format!("many-{i}"))).unwrap())
            .collect::<Vec<_>>()
    });
    let taken: Vec<_> = std::iter::from_fn(|| pool.try_get()).collect();
    let end = Instant::now() + ttl * 2;
    let lost = guards
        .iter()
        .filter(|g| g.wait_lost(end.saturating_duration_since(Instant::now())))
        .count();
    drop(taken);
    println!("{n} guards granted in {took:?}; leases lost over two TTLs: {lost}");
    assert_eq!(lost, 0);
}

/// Many guards of one locker over a link with a round trip of 10 ms or
/// more, and a pool otherwise idle: a renewal that finds the connection set
/// aside for renewals busy takes an idle pooled connection at once, so the
/// pool's connections renew side by side. (Queued on the one spare
/// connection, 150 renewals took 1.5 s a round, a whole TTL: 72 and 82 of
/// the 150 leases were lost in two runs, where the code before the spare
/// was shared lost none.)
#[test]
fn many_leases_renew_side_by_side_over_a_slow_link() {
    let server = Server::start();
    let proxy = Proxy::with_delay(server.port(), Duration::from_millis(5));
    // The grants go through at once; the renewals pay the delay.
    proxy.set(Mode::Pass);
    let pool = r2d2::Pool::builder()
        .max_size(8)
        .test_on_check_out(false)
        .build(redis::Client::open(proxy.url()).unwrap())
        .unwrap();
    let ttl = Duration::from_millis(1500);
    let locker = Locker::builder(pool)
        .ttl(ttl)
        .io_timeout(IO)
        .checkout_timeout(IO)
        .build()
        .unwrap();
    let guards: Vec<_> = (0..150)
        .map(|i| locker.lock(&key(&format!("slow-link-{i}"))).unwrap())
        .collect();
    proxy.set(Mode::Delay);
    // Each lease renews about five times meanwhile: 150 renewals every
    // 500 ms, where eight connections serve about 750 a second.
    let end = Instant::now() + ttl * 2;
    let lost = guards
        .iter()
        .filter(|g| g.wait_lost(end.saturating_duration_since(Instant::now())))
        .count();
    assert_eq!(lost, 0, "leases lost of 150, the pool idle");
    proxy.set(Mode::Pass);
    for g in guards {
        g.unlock().unwrap();
    }
}

/// The limit the crate docs give for a pool the application holds: the
/// renewals of all a locker's guards take turns on the one connection kept
/// aside, so 20 guards over a 10 ms round trip (200 ms a round, below a
/// third of the 1.5 s TTL) keep their leases. (Measured: 60 lost none, 100
/// lost 62 to 75, on a quiet machine; with 30, a CI run at load average 14
/// lost one: each renewal's own time grows with the load, so the test
/// keeps the slack the docs' rule leaves, not its edge.)
#[test]
fn guards_times_round_trip_below_a_third_of_the_ttl_keep_their_leases_in_a_held_pool() {
    let server = Server::start();
    let proxy = Proxy::with_delay(server.port(), Duration::from_millis(5));
    proxy.set(Mode::Pass);
    let pool = r2d2::Pool::builder()
        .max_size(8)
        .test_on_check_out(false)
        .build(redis::Client::open(proxy.url()).unwrap())
        .unwrap();
    let ttl = Duration::from_millis(1500);
    let locker = Locker::builder(pool.clone())
        .ttl(ttl)
        .io_timeout(IO)
        .checkout_timeout(IO)
        .build()
        .unwrap();
    let guards: Vec<_> = (0..20)
        .map(|i| locker.lock(&key(&format!("held-pool-{i}"))).unwrap())
        .collect();
    let taken: Vec<_> = std::iter::from_fn(|| pool.try_get()).collect();
    assert!(pool.try_get().is_none() && !taken.is_empty());
    proxy.set(Mode::Delay);
    let end = Instant::now() + ttl * 2;
    let lost = guards
        .iter()
        .filter(|g| g.wait_lost(end.saturating_duration_since(Instant::now())))
        .count();
    drop(taken);
    assert_eq!(lost, 0, "leases lost of 20, the pool held");
    proxy.set(Mode::Pass);
    for g in guards {
        g.unlock().unwrap();
    }
}

/// A renewal whose connection set aside for renewals is cut late in its
/// wait (here at 1.7 s of a 2 s I/O timeout), while the server stops
/// answering: it gives up within checkout + I/O timeout, the bound the docs
/// give for every renewal, instead of sending itself again on a pooled
/// connection for another I/O timeout. (It took about 3.7 s.)
#[test]
fn a_renewal_whose_spare_is_cut_late_returns_within_the_documented_bound() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let pool = r2d2::Pool::builder()
        .max_size(8)
        .test_on_check_out(false)
        .build(redis::Client::open(proxy.url()).unwrap())
        .unwrap();
    let (checkout, io) = (Duration::from_millis(100), Duration::from_secs(2));
    let locker = Locker::builder(pool)
        .ttl(Duration::from_secs(60))
        .io_timeout(io)
        .checkout_timeout(checkout)
        .build()
        .unwrap();
    let guard = locker.lock(&key("cut-late")).unwrap();
    // The renewal runs on the spare: the only connection that ran a script.
    guard.extend(Duration::from_secs(60)).unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    let spare: Vec<&str> = list
        .lines()
        .filter(|l| l.contains(" cmd=eval"))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .collect();
    assert_eq!(spare.len(), 1, "{list}");
    proxy.set(Mode::Blackhole);
    let cut = {
        let (id, mut conn) = (spare[0].to_owned(), server.conn());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1700));
            let _: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query(&mut conn)
                .unwrap();
        })
    };
    let (r, took) = timed(|| guard.extend(Duration::from_secs(60)));
    cut.join().unwrap();
    proxy.set(Mode::Pass);
    assert!(r.is_err(), "{r:?}");
    assert!(
        within(took, checkout + io),
        "a renewal took {took:?}, past checkout + I/O timeout"
    );
}

/// Kills every normal client connection of the server (the pool's idle
/// ones and the spare alike), as `redis-cli client kill type normal` does,
/// from a connection that spares itself.
#[allow(clippy::unwrap_used)] // a helper of the tests: failing loudly is the point
fn kill_normal_clients(server: &Server) {
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut server.conn())
        .unwrap();
}

/// Fills `pool` with open idle connections, as an application's burst of
/// calls leaves it: every connection it can open, each having answered.
#[allow(clippy::unwrap_used)] // a helper of the tests: failing loudly is the point
fn warm(pool: &r2d2::Pool<redis::Client>) {
    let mut held = Vec::new();
    while let Ok(mut conn) = pool.get_timeout(Duration::from_millis(500)) {
        let _: String = redis::cmd("PING").query(&mut *conn).unwrap();
        held.push(conn);
    }
    assert!(held.len() >= 8, "only {} connections", held.len());
}

/// After `CLIENT KILL TYPE normal` the server is fine, only the connections
/// are gone: the holder's next renewals must drop the killed connections
/// (the spare and the idle pooled ones alike, here a full pool of them) and
/// renew on fresh ones, so the lease outlives two TTLs, also when the
/// connections are killed twice in a row. (Before the fix, each renewal
/// took the next killed connection of the pool, failed with "redis command
/// failed", and the lease was lost.)
#[test]
fn a_lease_survives_its_connections_being_killed() {
    let server = Server::start();
    let k = key("client-killed");
    let events = common::keyspace_events(&server, &k, "Kg");
    let ttl = Duration::from_secs(3);
    let pool = redmutex::pool(&server.url()).unwrap();
    let locker = Locker::builder(pool.clone()).ttl(ttl).build().unwrap();
    let guard = locker.lock(&k).unwrap();
    let owner = common::owner_of(&server, &k).expect("held");
    let fence = guard.fencing_token();
    let still_ours = |when: &str| {
        assert!(!guard.is_lost(), "{when}: the lease was lost");
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query(&mut server.conn())
            .unwrap();
        assert!(pttl > 0, "{when}: PTTL {pttl}");
        assert_eq!(
            common::owner_of(&server, &k).as_deref(),
            Some(&*owner),
            "{when}"
        );
        let info = locker.holder(&k).unwrap().expect("still held");
        assert_eq!(info.fencing_token(), fence, "{when}");
    };
    // A renewal has run: the spare is set aside, and it is killed too.
    common::next_event(&events, "expire", BOUND);
    warm(&pool);
    kill_normal_clients(&server);
    std::thread::sleep(2 * ttl);
    still_ours("after one kill");
    warm(&pool);
    kill_normal_clients(&server);
    kill_normal_clients(&server);
    std::thread::sleep(2 * ttl);
    still_ours("after two kills in a row");
    guard.unlock().unwrap();
}
