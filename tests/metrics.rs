//! The `metrics` feature: what `Locker::stats` counts reaches the `metrics`
//! facade as it happens, under the documented names, labelled by prefix
//! and kind and never by key; `Builder::stats(false)` reports nothing.
//! Read back through a Prometheus recorder, as a user's exporter would.
#![cfg(feature = "metrics")]
#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::Server;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redmutex::{Backoff, Error};

/// The process's recorder (one per test binary), installed once.
fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| PrometheusBuilder::new().install_recorder().unwrap())
}

/// The value of the series `name` whose labels include every `labels`
/// pair, in the scrape text; 0 when there is none.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut found = 0.0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, v)) = line.rsplit_once(' ') else {
            continue;
        };
        let (n, l) = series.split_once('{').unwrap_or((series, ""));
        if n != name {
            continue;
        }
        let has = |(k, want): &(&str, &str)| l.contains(&format!("{k}=\"{want}\""));
        if labels.iter().all(has) {
            found += v.parse::<f64>().unwrap();
        }
    }
    found
}

#[test]
fn what_stats_counts_is_reported_by_prefix_and_kind() {
    let handle = handle();
    let server = Server::start();
    let prefix = "metrics-a";
    // A minute of lease and backoff (no renewal or retry comes due during
    // the test: a waiter gets the lock only by a hand-over), and a short
    // I/O timeout for the renewal that fails.
    let locker = server
        .builder()
        .prefix(prefix)
        .ttl(Duration::from_secs(60))
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let secret = "a-key-no-metric-names";

    // 3 plain grants.
    for _ in 0..3 {
        locker.lock(secret).unwrap().unlock().unwrap();
    }
    // A timeout.
    let held = locker.lock(secret).unwrap();
    assert!(matches!(
        common::elsewhere(|| locker.lock_timeout(secret, Duration::from_millis(50))),
        Err(Error::Timeout { .. })
    ));
    // A hand-over to a waiter queued behind the holder (the timeout's wait
    // started the release listener: it is up first, as in tests/stats.rs).
    common::wait_until(
        "the release listener is up",
        Duration::from_secs(10),
        || {
            redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(common::release_channel(Some(prefix)))
                .query::<(String, u64)>(&mut server.conn())
                .unwrap()
                .1
                == 1
        },
    );
    let waiter = {
        let locker = locker.clone();
        std::thread::Builder::new()
            .spawn(move || locker.lock_timeout(secret, Duration::from_secs(30)))
            .unwrap()
    };
    common::wait_until("the waiter is queued", Duration::from_secs(10), || {
        common::queued_in(&server, &common::queue_keys(Some(prefix), secret).0) == 1
    });
    held.unlock().unwrap();
    waiter.join().unwrap().unwrap().unlock().unwrap();
    // A loss found by a renewal (the key deleted), and one broken by an
    // operator (found by the release).
    let guard = locker.lock("gone").unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("{prefix}:gone"))
        .query(&mut server.conn())
        .unwrap();
    assert!(matches!(
        guard.extend(Duration::from_secs(60)),
        Err(Error::Lost { .. })
    ));
    drop(guard);
    let guard = locker.lock("stuck").unwrap();
    locker.break_lock("stuck", "test").unwrap();
    assert!(matches!(guard.unlock(), Err(Error::Lost { .. })));
    // A renewal that fails: the server does not answer in time.
    let guard = locker.lock("slow").unwrap();
    server.pause();
    let failed = guard.extend(Duration::from_secs(60));
    server.resume();
    assert!(failed.is_err(), "{failed:?}");
    guard.unlock().unwrap();
    // A permit, a read hold, a write hold, a leader.
    let sem = locker.semaphore("sem", 2).unwrap();
    sem.acquire().unwrap().unlock().unwrap();
    let rw = locker.rwlock("rw").unwrap();
    rw.read().unwrap().unlock().unwrap();
    rw.write().unwrap().unlock().unwrap();
    let election = locker.election("boss").unwrap();
    election.campaign("me").unwrap().resign().unwrap();

    let s = locker.stats();
    let text = handle.render();
    let of = |name: &str, kind: &str| value(&text, name, &[("prefix", prefix), ("kind", kind)]);
    let all = |name: &str| value(&text, name, &[("prefix", prefix)]);
    // Per kind: lock (3 + 2 hand-over + gone + stuck + slow), and one of
    // each other kind.
    assert_eq!(of("redmutex_grants_total", "lock"), 8.0, "{text}");
    for kind in ["permit", "read", "write", "leader"] {
        assert_eq!(of("redmutex_grants_total", kind), 1.0, "{kind}: {text}");
        assert_eq!(of("redmutex_wait_seconds_count", kind), 1.0, "{text}");
        assert_eq!(of("redmutex_hold_seconds_count", kind), 1.0, "{text}");
    }
    assert_eq!(of("redmutex_handovers_total", "lock"), 1.0, "{text}");
    assert_eq!(of("redmutex_timeouts_total", "lock"), 1.0, "{text}");
    assert_eq!(of("redmutex_renewals_failed_total", "lock"), 1.0, "{text}");
    let loss = |reason| {
        value(
            &text,
            "redmutex_losses_total",
            &[("prefix", prefix), ("kind", "lock"), ("reason", reason)],
        )
    };
    assert_eq!(
        (loss("not_ours"), loss("broken"), loss("expired")),
        (1.0, 1.0, 0.0),
        "{text}"
    );
    // The totals are what stats() counts.
    let n = |v: u64| v as f64;
    assert_eq!(all("redmutex_grants_total"), n(s.grants()), "{s:?}\n{text}");
    assert_eq!(all("redmutex_handovers_total"), n(s.hand_overs()));
    assert_eq!(all("redmutex_timeouts_total"), n(s.timeouts()));
    assert_eq!(all("redmutex_losses_total"), n(s.losses()));
    assert_eq!(
        all("redmutex_renewals_failed_total"),
        n(s.failed_renewals())
    );
    assert_eq!(all("redmutex_wait_seconds_count"), n(s.wait().count()));
    assert_eq!(all("redmutex_hold_seconds_count"), n(s.hold().count()));
    // Seconds, not microseconds: the longest wait (the hand-over's) is
    // below the test's own length.
    assert!(all("redmutex_wait_seconds_sum") < 60.0, "{text}");
    assert!(all("redmutex_wait_seconds_sum") > 0.0, "{text}");
    // Never a key: not as a label, not in a value.
    assert!(!text.contains(secret), "{text}");
    assert!(!text.contains("key=\""), "{text}");
}

#[test]
fn a_lease_that_runs_out_is_reported_as_expired() {
    let handle = handle();
    let server = Server::start();
    let locker = server
        .builder()
        .prefix("metrics-b")
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .build()
        .unwrap();
    let guard = locker.lock("expires").unwrap();
    assert!(guard.wait_lost(Duration::from_secs(30)));
    assert!(matches!(guard.unlock(), Err(Error::Lost { .. })));
    let text = handle.render();
    let labels = [("prefix", "metrics-b"), ("kind", "lock")];
    let expired = [labels[0], labels[1], ("reason", "expired")];
    assert_eq!(
        value(&text, "redmutex_losses_total", &expired),
        1.0,
        "{text}"
    );
    assert_eq!(
        value(&text, "redmutex_losses_total", &labels),
        1.0,
        "{text}"
    );
}

#[test]
fn stats_off_reports_nothing() {
    let handle = handle();
    let server = Server::start();
    let locker = server
        .builder()
        .prefix("metrics-off")
        .stats(false)
        .build()
        .unwrap();
    locker.lock("k").unwrap().unlock().unwrap();
    let text = handle.render();
    assert!(!text.contains("metrics-off"), "{text}");
}

#[test]
fn a_locker_without_a_prefix_is_labelled_with_an_empty_one() {
    let handle = handle();
    let server = Server::start();
    let locker = server.locker();
    let rw = locker.rwlock(common::key("no-prefix")).unwrap();
    rw.write().unwrap().unlock().unwrap();
    let text = handle.render();
    let labels = [("prefix", ""), ("kind", "write")];
    assert!(
        value(&text, "redmutex_grants_total", &labels) >= 1.0,
        "{text}"
    );
}
