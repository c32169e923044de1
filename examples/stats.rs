//! Live figures under load: six threads contend for a lock and a semaphore
//! for a few seconds while the main thread prints the locker's stats every
//! second, then it stops on its own.
//!
//! ```text
//! cargo run --example stats
//! ```
//!
//! Uses `REDIS_URL` when set; otherwise Redis on 127.0.0.1:6379; otherwise it
//! starts a throw-away `redis-server` and says so.
//!
//! Each line is one second's figures, read with `Locker::reset_stats` (which
//! returns what it clears): the shape a StatsD-like exporter wants. An
//! exporter for Prometheus-like systems would read `Locker::stats` instead
//! and never reset (see `Stats`' docs, "Exporting them").

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redmutex::Locker;

/// How long the load runs.
const RUN: Duration = Duration::from_secs(5);
const WORKERS: usize = 6;

/// Waits `d` without a busy loop (a channel nobody sends on).
fn pause(d: Duration) {
    let (_tx, rx) = std::sync::mpsc::channel::<()>();
    let _ = rx.recv_timeout(d);
}

/// A small pseudo-random sequence per worker (no dependency needed).
fn next(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *seed >> 33
}

/// One worker: mostly waits for the hot lock and holds it 0-3 ms; now and
/// then only tries it (a busy answer when held), waits for it at most 2 ms
/// (a timeout when held long enough), or takes one of 2 permits.
fn work(locker: &Locker, w: usize, stop: &AtomicBool) -> Result<(), redmutex::Error> {
    let permits = locker.semaphore("stats-example:exports", 2)?;
    let mut seed = w as u64 + 1;
    while !stop.load(Ordering::Relaxed) {
        let hold = Duration::from_micros(next(&mut seed) % 3_000);
        let guard = match next(&mut seed) % 10 {
            0 => locker.try_lock("stats-example:hot")?,
            1 => match locker.lock_timeout("stats-example:hot", Duration::from_millis(2)) {
                Ok(guard) => Some(guard),
                Err(redmutex::Error::Timeout { .. }) => None,
                Err(e) => return Err(e),
            },
            2 => Some(permits.acquire()?),
            _ => Some(locker.lock("stats-example:hot")?),
        };
        if let Some(guard) = guard {
            pause(hold);
            guard.unlock()?;
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let (url, _server) = support::redis_url()?;
    let locker = Locker::open(&url)?;
    let stop = Arc::new(AtomicBool::new(false));
    let workers = (0..WORKERS)
        .map(|w| {
            // Clones share the figures, and so do the semaphores made from them.
            let (locker, stop) = (locker.clone(), Arc::clone(&stop));
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || work(&locker, w, &stop))
        })
        .collect::<Result<Vec<_>, _>>()?;

    println!("{WORKERS} threads on one lock and a 2-permit semaphore, for {RUN:?}:");
    let start = Instant::now();
    let mut second = 0u32;
    while start.elapsed() < RUN {
        second += 1;
        pause(
            (start + Duration::from_secs(second.into())).saturating_duration_since(Instant::now()),
        );
        let s = locker.reset_stats();
        println!(
            "{second:>2}s  grants {:>4} (hand-overs {:>4})  busy {:>3}  timeouts {:>3}  \
             lost {}  failed renewals {}",
            s.grants(),
            s.hand_overs(),
            s.busy(),
            s.timeouts(),
            s.losses(),
            s.failed_renewals()
        );
        println!("     wait {}", s.wait());
        println!("     hold {}", s.hold());
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().map_err(|_| "a worker panicked")??;
    }
    println!("after the workers stopped: {}", locker.stats());
    Ok(())
}
