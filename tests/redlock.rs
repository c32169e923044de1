//! Redlock over 5 independent masters: majority grants, releases everywhere,
//! bounded calls with dead nodes, NoQuorum with too many dead, exclusion and
//! fencing across lockers, renewal on the quorum.
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::sync::Mutex;
use std::time::Duration;

use common::{holders_of, key, redlock_builder, servers, timed};
use redis::Commands;
use redmutex::{Backoff, Error, Locker};

const BOUND: Duration = Duration::from_secs(8);

/// Short pauses: separate lockers polling one key otherwise wait up to the
/// default backoff's 256 ms per round, which only slows the suite down.
fn quick() -> Backoff {
    Backoff::exponential(Duration::from_millis(1), Duration::from_millis(16))
}

#[test]
fn grants_on_a_majority_and_releases_everywhere() {
    let servers = servers(5);
    let locker = redlock_builder(&servers).build().unwrap();
    let k = key("rl");
    let g = locker.lock(&k).unwrap();
    assert_eq!(holders_of(&servers, &k), 5);
    // Every instance records the grant's (largest) fencing token.
    for s in &servers {
        assert_eq!(common::fence_of(s, &k), g.fencing_token());
    }
    assert_eq!(
        locker.holder(&k).unwrap().unwrap().fencing_token(),
        g.fencing_token()
    );
    let other = redlock_builder(&servers).build().unwrap();
    assert!(other.try_lock(&k).unwrap().is_none());
    g.unlock().unwrap();
    assert_eq!(holders_of(&servers, &k), 0);
    assert!(other.try_lock(&k).unwrap().is_some());
}

#[test]
fn a_minority_of_holders_is_released_at_once() {
    // 3 of 5 instances already hold the key for someone else: our attempt
    // takes the other 2, which must be released before the call returns.
    let servers = servers(5);
    let k = key("minority");
    for s in &servers[..3] {
        common::lock_as_someone_else(s, &k, 60_000);
    }
    let locker = redlock_builder(&servers).build().unwrap();
    assert!(locker.try_lock(&k).unwrap().is_none());
    for s in &servers[3..] {
        let exists: bool = s.conn().exists(&k).unwrap();
        assert!(!exists, "a partial hold was left behind");
    }
}

#[test]
fn two_dead_of_five_still_lock_within_bounds() {
    let mut servers = servers(5);
    let locker = redlock_builder(&servers)
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    servers[0].kill();
    servers[1].kill();
    let k = key("two-dead");
    let (g, took) = timed(|| locker.lock(&k));
    let g = g.unwrap();
    assert!(took < BOUND, "lock took {took:?}");
    assert_eq!(holders_of(&servers[2..], &k), 3);
    let (r, took) = timed(|| g.extend(Duration::from_secs(3)));
    r.unwrap();
    assert!(took < BOUND, "extend took {took:?}");
    let (r, took) = timed(|| g.unlock());
    r.unwrap();
    assert!(took < BOUND, "unlock took {took:?}");
    assert_eq!(holders_of(&servers[2..], &k), 0);
}

#[test]
fn three_dead_of_five_is_no_quorum_and_leaves_nothing() {
    let mut servers = servers(5);
    let locker = redlock_builder(&servers)
        .ttl(Duration::from_secs(3))
        .build()
        .unwrap();
    for s in &mut servers[..3] {
        s.kill();
    }
    let k = key("three-dead");
    let (r, took) = timed(|| locker.lock(&k));
    match r {
        Err(Error::NoQuorum {
            granted, needed, ..
        }) => {
            assert_eq!(needed, 3);
            assert!(granted <= 2);
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    assert!(took < BOUND, "NoQuorum took {took:?}");
    assert_eq!(
        holders_of(&servers[3..], &k),
        0,
        "survivors must hold no key"
    );
    assert!(matches!(locker.try_lock(&k), Err(Error::NoQuorum { .. })));
    assert_eq!(holders_of(&servers[3..], &k), 0);
}

#[test]
fn lockers_over_the_same_masters_exclude_each_other() {
    let servers = servers(5);
    let lockers: Vec<Locker> = (0..4)
        .map(|_| redlock_builder(&servers).backoff(quick()).build().unwrap())
        .collect();
    let total = common::count_under_lock(&lockers, &key("rl-counter"), &servers[0], 25);
    assert_eq!(total, 100);
}

#[test]
fn fencing_tokens_rise_across_lockers_while_nodes_die() {
    let mut servers = servers(5);
    let k = key("rl-fence");
    let lockers: Vec<Locker> = (0..3)
        .map(|_| {
            // A dead instance costs its checkout timeout on every call: keep
            // it short so the run stays quick.
            redlock_builder(&servers)
                .ttl(Duration::from_secs(2))
                .checkout_timeout(Duration::from_millis(50))
                .backoff(quick())
                .build()
                .unwrap()
        })
        .collect();
    let order = Mutex::new(Vec::new());
    let grants = || order.lock().unwrap().len();
    std::thread::scope(|scope| {
        for l in &lockers {
            let (k, order) = (&k, &order);
            scope.spawn(move || {
                for _ in 0..30 {
                    let g = l.lock(k).unwrap();
                    // Recorded while holding the lock: the vector is in grant order.
                    order.lock().unwrap().push(g.fencing_token());
                    drop(g);
                }
            });
        }
        // Two of the five masters die while the lockers are at work.
        common::wait_until("30 grants", Duration::from_secs(60), || grants() >= 30);
        servers[4].kill();
        common::wait_until("60 grants", Duration::from_secs(60), || grants() >= 60);
        servers[0].kill();
    });
    let tokens = order.lock().unwrap();
    assert_eq!(tokens.len(), 90);
    for pair in tokens.windows(2) {
        assert!(pair[0] < pair[1], "tokens not increasing: {pair:?}");
    }
}

#[test]
fn multi_key_locks_need_every_key_on_a_majority() {
    let servers = servers(3);
    let (a, b) = (key("rl-a"), key("rl-b"));
    // Someone holds `b` on two of the three instances: no majority has both.
    for s in &servers[..2] {
        common::lock_as_someone_else(s, &b, 60_000);
    }
    let locker = redlock_builder(&servers).build().unwrap();
    assert!(locker.try_lock_all(&[&a, &b]).unwrap().is_none());
    assert_eq!(
        holders_of(&servers, &a),
        0,
        "a partial hold was left behind"
    );
    for s in &servers[..2] {
        let _: () = s.conn().del(&b).unwrap();
    }
    let g = locker.try_lock_all(&[&a, &b]).unwrap().expect("free now");
    assert_eq!((holders_of(&servers, &a), holders_of(&servers, &b)), (3, 3));
    g.unlock().unwrap();
    assert_eq!(holders_of(&servers, &a) + holders_of(&servers, &b), 0);
}

#[test]
fn the_watchdog_renews_on_the_quorum() {
    let mut servers = servers(3);
    let k = key("rl-renew");
    let events = common::keyspace_events(&servers[1], &k, "Kg");
    let locker = redlock_builder(&servers)
        .ttl(Duration::from_millis(400))
        .build()
        .unwrap();
    let g = locker.lock(&k).unwrap();
    servers[0].kill(); // one of three gone: the other two still confirm
    for _ in 0..15 {
        common::next_event(&events, "expire", Duration::from_secs(20));
        g.ensure_held().unwrap();
    }
    assert_eq!(holders_of(&servers[1..], &k), 2);
    g.unlock().unwrap();
}

#[allow(clippy::unwrap_used)] // a helper of the tests: failing loudly is the point
fn flush(server: &common::Server) {
    let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
}

/// One master losing its data during a hold is repaired by the next
/// renewal, so that a second loss on another master does not hand a rival
/// a majority while the holder believes it holds the lock.
#[test]
fn a_master_that_lost_the_lock_is_repaired_by_renewal() {
    let servers = servers(3);
    let ttl = Duration::from_millis(1500);
    let holder = redlock_builder(&servers).ttl(ttl).build().unwrap();
    let rival = redlock_builder(&servers)
        .ttl(ttl)
        .backoff(quick())
        .build()
        .unwrap();
    let k = key("eroded");
    let g = holder.lock(&k).unwrap();
    let value = |s: &common::Server| -> Option<String> {
        redis::cmd("GET").arg(&k).query(&mut s.conn()).unwrap()
    };
    let ours = value(&servers[0]).unwrap();
    flush(&servers[0]);
    common::wait_until("the renewal puts the key back", ttl * 3, || {
        value(&servers[0]).as_deref() == Some(&ours)
    });
    flush(&servers[1]);
    // Two masters of three are ours: the rival must not get a majority.
    assert!(rival.try_lock(&k).unwrap().is_none());
    assert!(!g.is_lost());
    g.ensure_held().unwrap();
    g.unlock().unwrap();
}

/// When two masters lose the lock before a renewal could repair the first,
/// and a rival takes them, the holder is told at its next renewal.
#[test]
fn a_majority_taken_by_a_rival_is_reported_lost() {
    let servers = servers(3);
    let ttl = Duration::from_millis(1500);
    let holder = redlock_builder(&servers).ttl(ttl).build().unwrap();
    let rival = redlock_builder(&servers).ttl(ttl).build().unwrap();
    let k = key("taken-majority");
    let g = holder.lock(&k).unwrap();
    flush(&servers[0]);
    flush(&servers[1]);
    let r = rival.try_lock(&k).unwrap();
    if r.is_some() {
        // A renewal every ttl / 3, bounded by its I/O: told well within the TTL.
        assert!(g.wait_lost(ttl), "the holder was never told");
    }
    drop(r);
}

/// A rival holds the third master (a failed attempt's key, for a moment,
/// or longer): the grant is not kept on a bare majority, where one master's
/// data loss would hand the rival a majority; the lock is granted once the
/// third master is free, on all three.
#[test]
fn no_grant_is_kept_on_a_bare_majority() {
    let servers = servers(3);
    let locker = redlock_builder(&servers)
        .ttl(Duration::from_secs(30))
        .backoff(quick())
        .build()
        .unwrap();
    let k = key("bare");
    common::lock_as_someone_else(&servers[2], &k, 300);
    assert!(locker.try_lock(&k).unwrap().is_none());
    // Nothing of the refused attempt is left behind.
    assert_eq!(holders_of(&servers, &k), 1);
    let g = locker.lock(&k).unwrap();
    assert_eq!(holders_of(&servers, &k), 3);
    let ours = common::owner_of(&servers[0], &k);
    assert!(servers.iter().all(|s| common::owner_of(s, &k) == ours));
    g.unlock().unwrap();
    assert_eq!(holders_of(&servers, &k), 0);
}

#[test]
fn a_hung_master_costs_its_timeout_once_not_on_every_call() {
    let servers = servers(3);
    let io = Duration::from_millis(1500);
    let locker = redlock_builder(&servers)
        .ttl(Duration::from_secs(20))
        .io_timeout(io)
        .checkout_timeout(io)
        .build()
        .unwrap();
    let k = key("hung");
    locker.lock(&k).unwrap().unlock().unwrap(); // connections made
    servers[0].pause(); // SIGSTOP: every call to it waits out the I/O timeout
                        // 10 lock + unlock cycles, each a lock, a write-back and a release on
                        // every master: asking the hung one each time costs at least 30 I/O
                        // timeouts (45 s). Skipped after its first failure, it costs a few.
    let (cycles, took) = timed(|| {
        for _ in 0..10 {
            let g = locker.lock(&k)?;
            assert_eq!(holders_of(&servers[1..], &k), 2);
            g.unlock()?;
        }
        Ok::<(), Error>(())
    });
    cycles.unwrap();
    assert!(
        took < io * 10,
        "10 cycles took {took:?}: the hung master was waited for again and again"
    );
    // Back, it is used again once its break is over.
    servers[0].resume();
    common::wait_until("the master used again", Duration::from_secs(60), || {
        let g = locker.lock(&k).unwrap();
        let back = holders_of(&servers[..1], &k) == 1;
        g.unlock().unwrap();
        back
    });
}

/// How many scripts `server` ran since its statistics were reset.
#[allow(clippy::unwrap_used)] // a helper of the tests: failing loudly is the point
fn scripts_run(server: &common::Server) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn a_grant_on_every_master_with_one_token_needs_no_write_back() {
    // Every master minting the same token leaves them as the write-back
    // would: a lock and an unlock are one script per master each.
    let servers = servers(3);
    let locker = redlock_builder(&servers).watchdog(false).build().unwrap();
    let k = key("rl-one-token");
    locker.lock(&k).unwrap().unlock().unwrap();
    for s in &servers {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .exec(&mut s.conn())
            .unwrap();
    }
    let g = locker.lock(&k).unwrap();
    for s in &servers {
        assert_eq!(common::fence_of(s, &k), g.fencing_token());
    }
    g.unlock().unwrap();
    let run: Vec<u64> = servers.iter().map(scripts_run).collect();
    assert_eq!(
        run,
        [2, 2, 2],
        "scripts per master for a lock and an unlock"
    );
}

#[test]
fn a_master_counting_ahead_is_written_back() {
    // One master's counter far ahead: the masters mint different tokens,
    // and the grant's (the largest) is written back to all of them.
    let servers = servers(3);
    let k = key("rl-ahead");
    let locker = redlock_builder(&servers).build().unwrap();
    locker.lock(&k).unwrap().unlock().unwrap();
    let ahead: u64 = 9_000_000_000_000_000;
    redis::cmd("SET")
        .arg(common::fence_key(None))
        .arg(ahead)
        .exec(&mut servers[1].conn())
        .unwrap();
    let g = locker.lock(&k).unwrap();
    assert_eq!(g.fencing_token(), ahead + 1);
    for s in &servers {
        assert_eq!(common::fence_of(s, &k), ahead + 1);
        let counter: u64 = redis::cmd("GET")
            .arg(common::fence_key(None))
            .query(&mut s.conn())
            .unwrap();
        assert!(counter > ahead, "a master counts below the grant's token");
    }
}

/// Redlock caps each call at a tenth of the TTL, also on a pool a
/// single-server locker with a long I/O timeout used first: a frozen master
/// costs the cap, not the other locker's timeout. (The timeouts a
/// connection was given used to stay those of its first user.)
#[test]
fn the_tenth_of_the_ttl_cap_holds_on_a_pool_shared_with_another_locker() {
    let masters = servers(3);
    // One connection to the first master: the Redlock locker gets the very
    // connection the other locker used.
    let shared = masters[0].bare_pool(1);
    let single = Locker::builder(shared.clone())
        .io_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    single
        .try_lock(&key("warm"))
        .unwrap()
        .unwrap()
        .unlock()
        .unwrap();
    let mut b = Locker::builder(shared).ttl(Duration::from_secs(1));
    for m in &masters[1..] {
        b = b.instance(redmutex::pool(&m.url()).unwrap());
    }
    let redlock = b.build().unwrap();
    masters[0].pause();
    let (r, took) = timed(|| redlock.try_lock(&key("capped")));
    masters[0].resume();
    assert!(r.as_ref().is_ok_and(Option::is_some), "{r:?}");
    // 100 ms + 100 ms by the cap; 3 s by the other locker's timeout.
    assert!(
        took < Duration::from_millis(1500),
        "try_lock took {took:?} with one master frozen"
    );
}

/// A master's clock in µs (`TIME`).
#[allow(clippy::unwrap_used)] // a helper of the tests: failing loudly is the point
fn server_micros(server: &common::Server) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    secs * 1_000_000 + micros
}

/// A client whose clock runs an hour fast proposes tokens an hour ahead;
/// a master mints a proposal only up to its own clock plus the TTL (2 s at
/// most), so after every master crashes and comes back without data, no
/// sooner than the TTL later (as the crate docs advise), a grant from a
/// correct clock still gets a larger token. No server clock went back.
#[test]
fn a_fast_client_clock_cannot_make_tokens_fall_after_the_masters_lose_their_data() {
    let mut servers = servers(3);
    let ttl = Duration::from_secs(1);
    let k = key("rl-fast-clock");
    let fast = redlock_builder(&servers)
        .ttl(ttl)
        .test_clock_ahead(Duration::from_secs(3600))
        .build()
        .unwrap();
    let g = fast.lock(&k).unwrap();
    let before = g.fencing_token();
    g.unlock().unwrap();
    drop(fast);
    // Minted no further ahead of a master's clock than the TTL.
    let ttl_micros = u64::try_from(ttl.as_micros()).unwrap();
    assert!(
        before <= server_micros(&servers[0]) + ttl_micros,
        "a token {before} an hour ahead of the masters' clocks"
    );
    // Every master crashes and restarts without data (no persistence)...
    let crashed = server_micros(&servers[0]);
    for s in &mut servers {
        s.restart();
    }
    // ... no sooner than the TTL after the crash, by the masters' clock.
    common::wait_until("a TTL after the crash", Duration::from_secs(30), || {
        server_micros(&servers[0]) > crashed + ttl_micros
    });
    let correct = redlock_builder(&servers).ttl(ttl).build().unwrap();
    let g = correct.lock(&k).unwrap();
    assert!(
        g.fencing_token() > before,
        "the token fell from {before} to {} after the masters lost their data",
        g.fencing_token()
    );
    g.unlock().unwrap();
}

/// One master hangs across an unlock (its renewal just before timed out,
/// so the release cannot reach it either) and answers again at once: the
/// key left there is released once it does, so another locker gets the
/// lock well within the TTL that key had left. A hung master costs its
/// timeout, not the rest of the TTL.
#[test]
fn a_master_hung_across_an_unlock_does_not_block_the_lock_for_the_ttl() {
    let servers = servers(3);
    let ttl = Duration::from_secs(6);
    let io = Duration::from_millis(300);
    let k = key("rl-hung-unlock");
    let events = common::keyspace_events(&servers[1], &k, "Kg");
    let holder = redlock_builder(&servers)
        .ttl(ttl)
        .io_timeout(io)
        .checkout_timeout(io)
        .build()
        .unwrap();
    let g = holder.lock(&k).unwrap();
    servers[0].pause();
    // A renewal reaches the others and times out on the hung master; the
    // unlock waits for it, then releases.
    common::next_event(&events, "expire", Duration::from_secs(20));
    g.unlock().unwrap();
    servers[0].resume();
    let rival = redlock_builder(&servers)
        .ttl(ttl)
        .io_timeout(io)
        .checkout_timeout(io)
        .backoff(quick())
        .build()
        .unwrap();
    let (got, took) = timed(|| rival.lock_timeout(&k, Duration::from_secs(3)));
    let g = got.unwrap_or_else(|e| panic!("the lock was still blocked after {took:?}: {e}"));
    eprintln!("the rival got the lock {took:?} after the master answered again");
    assert_eq!(holders_of(&servers, &k), 3);
    g.unlock().unwrap();
}

/// Calls of plain `EVAL` that `server` has run so far (the clean-up after
/// an acquire whose reply was lost is one).
#[allow(clippy::unwrap_used)] // a helper of the tests: failing loudly is the point
fn eval_calls(server: &common::Server) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_eval:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// An attempt's acquire on one master stalls on a half-open connection and
/// times out, so its clean-up release is queued behind it on that
/// connection; a later attempt of the same `lock` reaches that master on a
/// fresh connection and is granted everywhere. When the stalled connection
/// delivers, the late acquire and its clean-up must leave the grant's key
/// there: otherwise the lock stands on a bare majority that believes it
/// holds every master, and one more master's data loss hands it to a rival.
#[test]
fn a_late_clean_up_of_an_earlier_attempt_leaves_the_grant_alone() {
    use redmutex_testkit::proxy::{Mode, Proxy};
    let servers = servers(3);
    let proxy = Proxy::start(servers[0].port());
    let io = Duration::from_millis(300);
    // No idle connection made ahead (r2d2's `min_idle`): the one the
    // first attempt stalls on is the only one there is then.
    let first = r2d2::Pool::builder()
        .max_size(8)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .build(redis::Client::open(proxy.url()).unwrap())
        .unwrap();
    let locker = Locker::builder(first)
        .instance(redmutex::pool(&servers[1].url()).unwrap())
        .instance(redmutex::pool(&servers[2].url()).unwrap())
        .ttl(Duration::from_secs(10))
        .io_timeout(io)
        .checkout_timeout(io)
        .watchdog(false)
        .backoff(quick())
        .build()
        .unwrap();
    let k = key("rl-late-clean-up");
    // Connections made, scripts loaded (a NOSCRIPT reply would mean
    // nothing ran).
    locker.lock(&k).unwrap().unlock().unwrap();
    // A rival holds one master past the first master's break (500 ms), so
    // that an attempt reaches it again before the lock is granted.
    common::lock_as_someone_else(&servers[1], &k, 1200);
    proxy.set(Mode::StallExisting);
    let g = locker.lock_timeout(&k, Duration::from_secs(8)).unwrap();
    // (The clean-up is a plain EVAL, queued behind the stall.)
    let evals = eval_calls(&servers[0]);
    let ours = common::owner_of(&servers[2], &k);
    assert!(ours.is_some());
    assert_eq!(common::owner_of(&servers[0], &k), ours, "not granted there");
    // The stalled connection delivers the first attempt's acquire and its
    // clean-up.
    proxy.set(Mode::Pass);
    common::wait_until("the late clean-up ran", Duration::from_secs(20), || {
        eval_calls(&servers[0]) > evals
    });
    assert_eq!(
        common::owner_of(&servers[0], &k),
        ours,
        "a late clean-up deleted the grant's key"
    );
    g.unlock().unwrap();
}

/// A renewal stalls on a half-open connection to one master and times
/// out; the unlock's release reaches that master later (sent again on a
/// fresh connection), and then the stalled connection delivers the
/// renewal, which puts our key back there (a renewal repairs a key of ours
/// that a master lost). That key must not keep the lock from everyone for
/// a whole TTL.
#[test]
fn a_renewal_delivered_after_the_unlock_does_not_block_the_lock_for_the_ttl() {
    use redmutex_testkit::proxy::{Mode, Proxy};
    let servers = servers(3);
    let proxy = Proxy::start(servers[0].port());
    // An I/O timeout no loaded machine reaches but on the stall.
    let (ttl, io) = (Duration::from_secs(10), Duration::from_secs(1));
    let first = r2d2::Pool::builder()
        .max_size(8)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .build(redis::Client::open(proxy.url()).unwrap())
        .unwrap();
    let holder = Locker::builder(first)
        .instance(redmutex::pool(&servers[1].url()).unwrap())
        .instance(redmutex::pool(&servers[2].url()).unwrap())
        .ttl(ttl)
        .io_timeout(io)
        .checkout_timeout(io)
        .build()
        .unwrap();
    let k = key("rl-late-renewal");
    let on_first = common::keyspace_events(&servers[0], &k, "Kg$");
    let on_second = common::keyspace_events(&servers[1], &k, "Kg");
    let g = holder.lock(&k).unwrap();
    // The grant's SET PX, then the first renewal, on both masters.
    for events in [&on_first, &on_second] {
        common::next_event(events, "expire", Duration::from_secs(20));
        common::next_event(events, "expire", Duration::from_secs(20));
    }
    proxy.set(Mode::StallExisting);
    // The next renewal reaches the others and stalls on the first master.
    common::next_event(&on_second, "expire", Duration::from_secs(20));
    g.unlock().unwrap();
    common::next_event(&on_first, "del", Duration::from_secs(10));
    // The stalled renewal arrives, and puts our key back. Under load the
    // connection it stalled on may be given up (and closed) before the
    // proxy lets it through; then no key comes back, which the lock below
    // must survive all the same, so that is said, not failed.
    proxy.set(Mode::Pass);
    if !common::saw_event(&on_first, "set", Duration::from_secs(20)) {
        eprintln!("the stalled renewal never reached the first master in this run");
    }
    let rival = redlock_builder(&servers)
        .ttl(ttl)
        .io_timeout(io)
        .checkout_timeout(io)
        .backoff(quick())
        .build()
        .unwrap();
    let (got, took) = timed(|| rival.lock_timeout(&k, Duration::from_secs(3)));
    let g = got.unwrap_or_else(|e| panic!("the lock was still blocked after {took:?}: {e}"));
    eprintln!("the rival got the lock {took:?} after the late renewal");
    g.unlock().unwrap();
}
