//! How long a waiting `lock_timeout` may take past its wait when the
//! server stops answering (issue 38, the suspected waiting-time items).
#![allow(clippy::disallowed_methods)] // tests spawn threads directly: a failed spawn should panic

mod common;

use std::time::{Duration, Instant};

use common::{key, wait_until, Server};
use redmutex::{Backoff, Locker};
use redmutex_testkit::proxy::{Mode, Proxy};

/// A waiter's attempt that times out returns its error after that one
/// attempt: it does not spend another I/O timeout leaving the queue on the
/// server that just failed to answer (its place expires on its own within
/// its stay). Before, `lock_timeout` took two I/O timeouts here.
#[test]
fn a_waiter_whose_attempt_times_out_returns_after_that_attempt() {
    let server = Server::start();
    let k = key("wait-bound-error");
    let _held = server.locker().lock(&k).unwrap();
    let proxy = Proxy::start(server.port());
    let io = Duration::from_secs(2);
    let checkout = Duration::from_millis(100);
    let waiter = Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .io_timeout(io)
        .checkout_timeout(checkout)
        .build()
        .unwrap();
    let k2 = k.clone();
    let t = std::thread::spawn(move || {
        let r = waiter.lock_timeout(&k2, Duration::from_secs(60));
        (r.map(drop), Instant::now())
    });
    // Queued, and the listener subscribed: its start-up is behind us.
    wait_until(
        "the waiter queued and listening",
        Duration::from_secs(20),
        || {
            server.release_subscribers() >= 1
                && redis::cmd("ZCARD")
                    .arg(common::queue_keys(None, &k).0)
                    .query::<u64>(&mut server.conn())
                    .unwrap_or(0)
                    == 1
        },
    );
    proxy.set(Mode::StallReplies);
    let stalled = Instant::now();
    let (r, ended) = t.join().unwrap();
    let took = ended - stalled;
    assert!(r.as_ref().is_err_and(|e| e.is_connection()), "{r:?}");
    // One backoff pause and one attempt (checkout + I/O timeout), with a
    // generous second for a loaded machine; two I/O timeouts would be 4 s.
    let bound = Duration::from_millis(100) + checkout + io + Duration::from_millis(1000);
    assert!(
        took <= bound,
        "returned {took:?} after the stall (bound {bound:?})"
    );
}
