//! The log events a holder needs to see (a lease lost and why, a max hold
//! reached, a release that failed on drop, a lock acquired after waiting,
//! a lease in doubt and held again), caught by a test logger; and no owner
//! token in any of them. Also `Guard::expire_at`, which ends a hold at a
//! given time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{key, owner_of, wait_until, Server};

/// Every event logged in this test binary: (target, level, message).
static EVENTS: Mutex<Vec<(String, log::Level, String)>> = Mutex::new(Vec::new());

struct Catch;

impl log::Log for Catch {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        EVENTS.lock().unwrap().push((
            record.target().to_owned(),
            record.level(),
            record.args().to_string(),
        ));
    }
    fn flush(&self) {}
}

static LOGGER: Catch = Catch;

fn catch_events() {
    // Several tests run in one binary: the first one installs the logger.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Trace);
}

/// The events that name `k`, after checking that none of all the events
/// so far holds `token`.
fn events_about(k: &str, token: &str) -> Vec<(String, log::Level, String)> {
    let events = EVENTS.lock().unwrap();
    for (target, _, message) in events.iter() {
        assert!(
            !message.contains(token) && !message.contains(&token[..16]),
            "an owner token in a log event ({target}): {message}"
        );
    }
    events
        .iter()
        .filter(|(_, _, m)| m.contains(k))
        .cloned()
        .collect()
}

#[test]
fn a_lost_lease_is_logged_with_its_reason_and_no_token() {
    catch_events();
    let server = Server::start();
    let locker = server.locker_with_ttl(Duration::from_millis(600));
    let k = key("lost");
    let guard = locker.lock(&k).unwrap();
    let token = owner_of(&server, &k).unwrap();
    let _: () = redis::Commands::del(&mut server.conn(), &k).unwrap();
    assert!(guard.wait_lost(Duration::from_secs(10)));
    // The watchdog logs the loss just after it marks it, which is what
    // wakes `wait_lost`: the event may come a moment later.
    let logged = |events: &[(String, log::Level, String)]| {
        events.iter().any(|(t, l, m)| {
            t == "redmutex::lease"
                && *l == log::Level::Error
                && m.contains("gone or someone else's")
        })
    };
    wait_until("the loss is logged", Duration::from_secs(10), || {
        logged(&events_about(&k, &token))
    });
    drop(guard);
    let events = events_about(&k, &token);
    assert!(
        events
            .iter()
            .any(|(t, _, m)| t == "redmutex::release" && m.contains("lost before")),
        "{events:?}"
    );
}

/// A lease in doubt (its renewals stalled by a proxy) is logged at `warn`,
/// and at `info` when a renewal gets through and it is held again.
#[test]
fn a_lease_in_doubt_and_held_again_is_logged() {
    use redmutex::LeaseState;
    use redmutex_testkit::proxy::{Mode, Proxy};
    catch_events();
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let io = Duration::from_millis(300);
    let locker = redmutex::Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .ttl(Duration::from_secs(6))
        .io_timeout(io)
        .checkout_timeout(io)
        .build()
        .unwrap();
    let k = key("doubt");
    let guard = locker.lock(&k).unwrap();
    let token = owner_of(&server, &k).unwrap();
    proxy.set(Mode::Blackhole);
    let long = Duration::from_secs(30);
    assert_eq!(
        guard.wait_state_change(LeaseState::Held, long),
        LeaseState::InDoubt
    );
    proxy.set(Mode::Pass);
    assert_eq!(
        guard.wait_state_change(LeaseState::InDoubt, long),
        LeaseState::Held
    );
    guard.unlock().unwrap();
    let events = events_about(&k, &token);
    let logged = |level, what: &str| {
        events
            .iter()
            .any(|(t, l, m)| t == "redmutex::lease" && *l == level && m.contains(what))
    };
    assert!(logged(log::Level::Warn, "in doubt"), "{events:?}");
    assert!(logged(log::Level::Info, "held again"), "{events:?}");
}

#[test]
fn a_max_hold_stops_renewing_and_says_so() {
    catch_events();
    let server = Server::start();
    let locker = server
        .builder()
        .ttl(Duration::from_millis(600))
        .max_hold(Duration::from_millis(300))
        .build()
        .unwrap();
    let k = key("max-hold");
    let started = Instant::now();
    let guard = locker.lock(&k).unwrap();
    let token = owner_of(&server, &k).unwrap();
    // Lost at most a TTL after the max hold, and not renewed meanwhile: the
    // key expires in Redis on its own.
    assert!(guard.wait_lost(Duration::from_secs(10)));
    assert!(started.elapsed() >= Duration::from_millis(300));
    wait_until("the key expires", Duration::from_secs(10), || {
        owner_of(&server, &k).is_none()
    });
    let events = events_about(&k, &token);
    assert!(
        events.iter().any(|(t, l, m)| t == "redmutex::renew"
            && *l == log::Level::Warn
            && m.contains("max hold")),
        "{events:?}"
    );
    assert!(locker.try_lock(&k).unwrap().is_some());
}

#[test]
fn a_max_hold_is_checked() {
    let server = Server::start();
    let e = server
        .builder()
        .max_hold(Duration::MAX)
        .build()
        .unwrap_err();
    assert!(matches!(e, redmutex::Error::InvalidInput(_)), "{e:?}");
}

#[test]
fn expire_at_keeps_the_lock_until_then_and_lets_it_go_by_itself() {
    let server = Server::start();
    let (a, b) = (server.locker(), server.locker());
    let k = key("min-hold");
    let guard = a.lock(&k).unwrap();
    guard
        .expire_at(Instant::now() + Duration::from_millis(1500))
        .unwrap();
    let pttl: i64 = redis::Commands::pttl(&mut server.conn(), &k).unwrap();
    assert!(pttl > 0 && pttl <= 1500, "{pttl}");
    assert!(b.try_lock(&k).unwrap().is_none(), "held until then");
    wait_until("the key expires", Duration::from_secs(10), || {
        owner_of(&server, &k).is_none()
    });
    assert!(b.try_lock(&k).unwrap().is_some());
}

#[test]
fn expire_at_in_the_past_is_an_unlock_and_a_lost_lease_is_reported() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("past");
    let guard = locker.lock(&k).unwrap();
    guard.expire_at(Instant::now()).unwrap();
    assert!(owner_of(&server, &k).is_none());
    let guard = locker.lock(&k).unwrap();
    let _: () = redis::Commands::del(&mut server.conn(), &k).unwrap();
    let e = guard
        .expire_at(Instant::now() + Duration::from_secs(60))
        .unwrap_err();
    assert!(matches!(e, redmutex::Error::Lost { .. }), "{e:?}");
    assert!(owner_of(&server, &k).is_none(), "nothing written back");
}

/// A lease-change callback slow enough to hold up its guard's renewals
/// (here 1.5 s, on a 3 s lease: a renewal is due every second) is said
/// so at `warn`, naming the lock: else a lease lost for it reads only
/// "no renewal confirmed in time", with the server answering all along.
#[test]
#[allow(clippy::disallowed_methods)] // the slow callback sleeps: that is what is tested
fn a_slow_lease_change_callback_is_logged() {
    use redmutex::LeaseState;
    use redmutex_testkit::proxy::{Mode, Proxy};
    catch_events();
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let io = Duration::from_millis(500);
    let locker = redmutex::Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .ttl(Duration::from_secs(3))
        .io_timeout(io)
        .checkout_timeout(io)
        .on_lease_change(|c| {
            if c.to() == LeaseState::InDoubt {
                std::thread::sleep(Duration::from_millis(1500));
            }
        })
        .build()
        .unwrap();
    let k = key("slow-callback");
    let guard = locker.lock(&k).unwrap();
    let token = owner_of(&server, &k).unwrap();
    proxy.set(Mode::Blackhole);
    let long = Duration::from_secs(30);
    assert_eq!(
        guard.wait_state_change(LeaseState::Held, long),
        LeaseState::InDoubt
    );
    proxy.set(Mode::Pass);
    let slow = |events: &[(String, log::Level, String)]| {
        events.iter().any(|(t, l, m)| {
            t == "redmutex::lease" && *l == log::Level::Warn && m.contains("callback ran for")
        })
    };
    wait_until("the slow callback logged", long, || {
        slow(&events_about(&k, &token))
    });
    drop(guard);
}
