//! The live figures through the `metrics` facade, exported for Prometheus:
//! a Prometheus recorder is installed, a short workload runs (locks, a
//! hand-over, a timeout, a permit, read and write holds, a leader, a hold
//! broken by an operator), and the scrape text is printed, next to the
//! locker's own `stats()` line that it agrees with.
//!
//! ```text
//! cargo run --example metrics --features metrics
//! ```
//!
//! Uses `REDIS_URL` when set; otherwise Redis on 127.0.0.1:6379; otherwise it
//! starts a throw-away `redis-server` and says so.
//!
//! A real service serves `handle.render()` on its `/metrics` endpoint (with
//! the HTTP listener of `metrics-exporter-prometheus`, or its own server);
//! every metric carries the labels `prefix` and `kind`, never the key.

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::error::Error;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use redmutex::Locker;

fn main() -> Result<(), Box<dyn Error>> {
    // Installed before the locker is built, so that it is told what each
    // metric means (its HELP line); figures reach it either way.
    let buckets = [0.000_1, 0.001, 0.01, 0.1, 1.0, 10.0];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)?
        .install_recorder()?;

    let (url, _server) = support::redis_url()?;
    let pool = redmutex::pool(&url)?;
    let locker = Locker::builder(pool)
        .prefix("metrics-example")
        .ttl(Duration::from_secs(5))
        .build()?;

    // Three plain grants.
    for _ in 0..3 {
        locker.lock("report")?.unlock()?;
    }
    // A hand-over: a waiter queued behind a holder gets the lock from its
    // release.
    let held = locker.lock("report")?;
    let waiter = {
        let locker = locker.clone();
        std::thread::Builder::new().spawn(move || locker.lock("report").map(drop))?
    };
    while locker
        .holder("report")?
        .is_some_and(|h| h.waiters().is_empty())
    {
        std::thread::yield_now();
    }
    held.unlock()?;
    waiter.join().map_err(|_| "the waiter panicked")??;
    // A timeout, of another thread (this one would be told it holds the
    // lock already: Error::AlreadyHeld).
    let held = locker.lock("report")?;
    let other = locker.clone();
    std::thread::scope(|s| {
        let timed_out = s.spawn(|| other.lock_timeout("report", Duration::from_millis(50)));
        assert!(timed_out
            .join()
            .is_ok_and(|r| r.is_err_and(|e| e.is_timeout())));
    });
    held.unlock()?;
    // A permit, a read and a write hold, a leader.
    locker.semaphore("exports", 2)?.acquire()?.unlock()?;
    let config = locker.rwlock("config")?;
    config.read()?.unlock()?;
    config.write()?.unlock()?;
    locker
        .election("scheduler")?
        .campaign("10.0.0.7:8080")?
        .resign()?;
    // A hold broken by an operator: its holder finds out at its release.
    let stuck = locker.lock("stuck")?;
    locker.break_lock("stuck", "the demo breaks it")?;
    let _ = stuck.unlock(); // Err(Lost): counted as broken

    println!("# locker.stats(): {}\n", locker.stats());
    print!("{}", handle.render());
    Ok(())
}
