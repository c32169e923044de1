//! A release hands the lock to the first queued waiter; a waiter that is
//! gone (killed, or left with an error) must not keep the lock from the
//! others for its TTL: a hand-over is only a claim for a short window until
//! the grantee takes it up.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

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
