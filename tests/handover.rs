//! A release hands the lock to the first queued waiter; a waiter that is
//! gone (killed, or left with an error) must not keep the lock from the
//! others for its TTL: a hand-over is only a claim for a short window until
//! the grantee takes it up.
#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::time::Duration;

use common::{key, Server};
use redmutex::Locker;
use redmutex_testkit::proxy::{Mode, Proxy};

/// What a waiter of a default locker leaves in the queue: arrived now
/// (server clock), stays 256 ms of backoff plus 2 s of I/O timeout, and
/// wants the default 30 s TTL.
fn plant_killed_waiter(server: &Server, k: &str) {
    let (secs, micros): (String, String) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    let now_ms = secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000;
    server.queue_dead_waiter(k, &format!("{now_ms}:2256:30000:killed"));
}

fn queued(server: &Server, k: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(common::queue_keys(None, k).0)
        .query(&mut server.conn())
        .unwrap()
}

/// Locks `k` on another thread, waiting at most `within`.
fn waiter(
    locker: &Locker,
    k: &str,
    within: Duration,
) -> std::thread::JoinHandle<Result<u64, redmutex::Error>> {
    let (locker, k) = (locker.clone(), k.to_owned());
    std::thread::Builder::new()
        .spawn(move || locker.lock_timeout(&k, within).map(|g| g.fencing_token()))
        .unwrap()
}

#[test]
fn a_killed_waiter_costs_the_claim_window_not_the_ttl() {
    let server = Server::start();
    let k = key("killed-waiter");
    let holder = server.locker();
    let live = server.locker();
    let held = holder.lock(&k).unwrap();
    plant_killed_waiter(&server, &k);
    // Queued behind the dead one.
    let w = waiter(&live, &k, Duration::from_secs(15));
    common::wait_until("the live waiter is queued", Duration::from_secs(10), || {
        queued(&server, &k) == 2
    });
    held.unlock().unwrap();
    // Handed to the dead waiter first: what it got must expire within the
    // claim window, well before the 30 s TTL it asked for.
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&k)
        .query(&mut server.conn())
        .unwrap();
    assert!(pttl <= 2256, "the dead waiter holds the lock for {pttl} ms");
    assert!(
        w.join().unwrap().is_ok(),
        "the live waiter waited out the TTL"
    );
}

#[test]
fn a_granted_claim_is_taken_up_for_the_whole_ttl() {
    // The live grantee of a hand-over extends the claim to its TTL at once.
    let server = Server::start();
    let k = key("taken-up");
    let a = server.locker();
    let b = server.locker();
    let held = a.lock(&k).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = {
        let (b, k) = (b.clone(), k.clone());
        std::thread::Builder::new()
            .spawn(move || {
                let g = b.lock(&k).unwrap();
                tx.send(()).unwrap();
                // Hold it until the main thread has looked.
                std::thread::park();
                g.unlock().unwrap();
            })
            .unwrap()
    };
    common::wait_until("the waiter is queued", Duration::from_secs(10), || {
        queued(&server, &k) == 1
    });
    held.unlock().unwrap();
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    common::wait_until(
        "the grantee extends its claim to the TTL",
        Duration::from_secs(10),
        || {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&k)
                .query(&mut server.conn())
                .unwrap();
            pttl > 20_000
        },
    );
    t.thread().unpark();
    t.join().unwrap();
}

#[test]
fn a_waiter_that_fails_leaves_the_queue() {
    let server = Server::start();
    let k = key("failed-waiter");
    let holder = server.locker();
    let proxy = Proxy::start(server.port());
    // Connections opened up front, so that what follows the failure (the
    // clean-up) still reaches the server while the replies are dropped.
    let pool = r2d2::Pool::builder()
        .max_size(8)
        .min_idle(Some(8))
        .test_on_check_out(false)
        .connection_customizer(Box::new(redmutex::SocketTimeouts::new(
            Duration::from_secs(2),
        )))
        .build(redis::Client::open(proxy.url()).unwrap())
        .unwrap();
    let doomed = Locker::new(pool.clone());
    let held = holder.lock(&k).unwrap();
    let w = waiter(&doomed, &k, Duration::from_secs(60));
    common::wait_until("the waiter is queued", Duration::from_secs(10), || {
        queued(&server, &k) == 1
    });
    common::wait_until("the pool is full", Duration::from_secs(10), || {
        pool.state().idle_connections >= 6
    });
    // A waiter that gives up, so that the server knows the script for
    // leaving the queue (a NOSCRIPT reply would be dropped too).
    let impatient = common::elsewhere(|| holder.lock_timeout(&k, Duration::from_millis(20)));
    assert!(matches!(impatient, Err(redmutex::Error::Timeout { .. })));
    // Its requests still arrive, but no reply comes back.
    proxy.set(Mode::DropReplies);
    let got = w.join().unwrap();
    assert!(got.is_err(), "{got:?}");
    assert_eq!(queued(&server, &k), 0, "the failed waiter is still queued");
    held.unlock().unwrap();
    // Nothing was handed to it: the lock is free.
    assert!(holder.holder(&k).unwrap().is_none());
}

/// The claim of a `slow_link_waiter`: its stay, a second of backoff (its
/// longest queued pause) plus 2 s of checkout and I/O timeouts.
const CLAIM: Duration = Duration::from_secs(3);

/// A locker whose every round trip crosses `proxy` (150 ms each way), with
/// a minute of backoff: queued, it calls only every second, to keep its
/// place. Released as soon as it is queued, a lock is handed over to it
/// about 300 ms after its attempt, well within a third of its 3 s claim,
/// so it takes it as handed (unless its listener was not up yet).
fn slow_link_waiter(proxy: &Proxy) -> Locker {
    Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .backoff(redmutex::Backoff::fixed(Duration::from_secs(60)))
        .on_lease_change(|c| {
            CHANGES
                .lock()
                .unwrap()
                .push((c.key().to_owned(), c.from(), c.to(), c.reason()))
        })
        .build()
        .unwrap()
}

/// The lease changes told to `slow_link_waiter`s' callbacks.
static CHANGES: std::sync::Mutex<
    Vec<(
        String,
        redmutex::LeaseState,
        redmutex::LeaseState,
        redmutex::LeaseChangeReason,
    )>,
> = std::sync::Mutex::new(Vec::new());

/// What a waiter saw the moment `lock` returned: when, and its guard's
/// deadline and state then.
struct Returned {
    guard: redmutex::Guard,
    at: std::time::Instant,
    valid_until: std::time::Instant,
    state: redmutex::LeaseState,
}

/// `holder` holds `k`, a waiter of `waiter` queues behind it, the holder
/// releases; returns what the waiter saw as `lock` returned, if the lock
/// was handed over to it by that release (`None`: its own next attempt
/// took it, a precondition the caller tries again).
fn handed_over(server: &Server, holder: &Locker, waiter: &Locker, k: &str) -> Option<Returned> {
    let held = holder.lock(k).unwrap();
    let before = waiter.stats().hand_overs();
    let t = {
        let (waiter, k) = (waiter.clone(), k.to_owned());
        std::thread::Builder::new()
            .spawn(move || {
                let guard = waiter.lock(&k).unwrap();
                let at = std::time::Instant::now();
                let (valid_until, state) = (guard.valid_until(), guard.state());
                Returned {
                    guard,
                    at,
                    valid_until,
                    state,
                }
            })
            .unwrap()
    };
    common::wait_until("the waiter is queued", Duration::from_secs(10), || {
        queued(server, k) == 1
    });
    held.unlock().unwrap();
    let returned = t.join().unwrap();
    (waiter.stats().hand_overs() > before).then_some(returned)
}

/// [`handed_over`] on the keys `<name>-<round>` until one is handed over
/// (four rounds at most): that key, and what its waiter saw.
fn first_handed_over(
    server: &Server,
    holder: &Locker,
    waiter: &Locker,
    name: &str,
) -> (String, Returned) {
    for round in 0..4 {
        let k = key(&format!("{name}-{round}"));
        if let Some(r) = handed_over(server, holder, waiter, &k) {
            return (k, r);
        }
    }
    panic!("no round of four was handed over (each waiter took the lock by its own attempt)");
}

/// A waiter handed the lock by a release returns from `lock` with no round
/// trip of its own after the announcement: its guard is `Held` with the
/// claim's deadline (the take-up its watchdog sends at once has not come
/// back yet: every trip of the waiter's takes 150 ms), and its watchdog
/// then takes the lease up to the full TTL.
#[test]
fn a_handed_over_waiter_returns_at_once_and_takes_its_lease_up_behind() {
    let server = Server::start();
    let proxy = Proxy::with_delay(server.port(), Duration::from_millis(150));
    let (holder, waiter) = (server.locker(), slow_link_waiter(&proxy));
    let (k, r) = first_handed_over(&server, &holder, &waiter, "claim-returned");
    assert_eq!(r.state, redmutex::LeaseState::Held);
    let left = r.valid_until.saturating_duration_since(r.at);
    assert!(
        left > Duration::ZERO && left < CLAIM,
        "lock returned with {left:?} of lease: it waited for the take-up"
    );
    common::wait_until(
        "the watchdog takes the lease up to the TTL",
        Duration::from_secs(10),
        || r.guard.valid_until() > std::time::Instant::now() + Duration::from_secs(20),
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&k)
        .query(&mut server.conn())
        .unwrap();
    assert!(
        pttl > 20_000,
        "the key's PTTL is {pttl} ms after the take-up"
    );
    assert_eq!(r.guard.state(), redmutex::LeaseState::Held);
    r.guard.unlock().unwrap();
}

/// A take-up that finds the key gone (deleted while the take-up was on its
/// way): the guard `lock` returned is lost, told to the callback as a
/// change from `Held`, and counted in the stats as a hand-over and a loss.
#[test]
fn a_take_up_that_finds_the_key_gone_loses_the_guard() {
    let server = Server::start();
    let proxy = Proxy::with_delay(server.port(), Duration::from_millis(150));
    let (holder, waiter) = (server.locker(), slow_link_waiter(&proxy));
    let (k, r) = first_handed_over(&server, &holder, &waiter, "take-up-fails");
    // The take-up is on its way (150 ms to the server): the key goes first.
    let _: i64 = redis::cmd("DEL").arg(&k).query(&mut server.conn()).unwrap();
    assert!(
        r.guard.wait_lost(Duration::from_secs(10)),
        "the guard of a take-up that found the key gone is not lost"
    );
    assert_eq!(
        r.guard.lost_reason().as_deref(),
        Some("Redis showed the key gone or someone else's")
    );
    let s = waiter.stats();
    assert_eq!((s.hand_overs(), s.losses_not_ours()), (1, 1), "{s}");
    common::wait_until("the loss is told", Duration::from_secs(10), || {
        CHANGES.lock().unwrap().iter().any(|c| c.0 == k)
    });
    let told: Vec<_> = CHANGES
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.0 == k)
        .map(|c| (c.1, c.2, c.3))
        .collect();
    assert_eq!(
        told,
        [(
            redmutex::LeaseState::Held,
            redmutex::LeaseState::Lost,
            redmutex::LeaseChangeReason::NotOurs
        )]
    );
}

/// With a lock-delay, and without a watchdog, the claim is taken up before
/// `lock` returns (a claim carries no lock-delay mark until its take-up,
/// and without a watchdog nothing would take it up): the guard starts with
/// a full TTL, as after any other grant.
#[test]
fn with_a_lock_delay_or_no_watchdog_lock_takes_the_claim_up_before_it_returns() {
    let server = Server::start();
    let proxy = Proxy::with_delay(server.port(), Duration::from_millis(150));
    let holder = server.locker();
    let build = |delayed: bool| {
        let b = Locker::builder(redmutex::pool(&proxy.url()).unwrap())
            .backoff(redmutex::Backoff::fixed(Duration::from_secs(60)));
        if delayed {
            b.lock_delay(Duration::from_millis(500))
        } else {
            b.watchdog(false)
        }
        .build()
        .unwrap()
    };
    for delayed in [true, false] {
        let waiter = build(delayed);
        let name = format!("taken-up-first-{delayed}");
        let (_, r) = first_handed_over(&server, &holder, &waiter, &name);
        let left = r.valid_until.saturating_duration_since(r.at);
        assert!(
            left > Duration::from_secs(20),
            "lock returned with {left:?} of lease (lock-delay: {delayed}): the claim"
        );
        r.guard.unlock().unwrap();
    }
}
