//! A semaphore of 3 permits shared by 8 workers over two lockers (two
//! "machines"): at most 3 run at once, and the timeline shows it. Each row
//! is a worker, each column 20 ms; `#` marks a worker holding a permit.
//!
//! ```text
//! cargo run --example semaphore
//! ```
//!
//! Uses `REDIS_URL` when set; otherwise Redis on 127.0.0.1:6379; otherwise it
//! starts a throw-away `redis-server` and says so.

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::error::Error;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redmutex::Locker;

const PERMITS: u32 = 3;
const WORKERS: usize = 8;
const SLOT: Duration = Duration::from_millis(20);

/// The work done under a permit.
fn export() {
    #[allow(clippy::disallowed_methods)] // simulated work, not a wait for an event
    std::thread::sleep(3 * SLOT);
}

fn main() -> Result<(), Box<dyn Error>> {
    let (url, _server) = support::redis_url()?;
    let machines = [Locker::open(&url)?, Locker::open(&url)?];
    let name = format!("example:exports:{}", std::process::id());
    let start = Instant::now();
    // (worker, held from, held until, fencing token)
    let spans = Arc::new(Mutex::new(Vec::new()));

    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let machine = machines.get(w % 2).ok_or("no machine")?;
        let exports = machine.semaphore(&name, PERMITS)?;
        let spans = Arc::clone(&spans);
        workers.push(
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || -> Result<(), redmutex::Error> {
                    for _ in 0..2 {
                        let permit = exports.acquire()?;
                        let from = start.elapsed();
                        export();
                        permit.ensure_held()?;
                        let until = start.elapsed();
                        let token = permit.fencing_token();
                        permit.unlock()?;
                        if let Ok(mut spans) = spans.lock() {
                            spans.push((w, from, until, token));
                        }
                    }
                    Ok(())
                })?,
        );
    }
    for w in workers {
        w.join().map_err(|_| "a worker panicked")??;
    }

    let spans = spans.lock().map_err(|_| "poisoned")?.clone();
    let end = spans.iter().map(|s| s.2).max().unwrap_or_default();
    let columns = end.as_millis() / SLOT.as_millis() + 1;
    println!("{WORKERS} workers, {PERMITS} permits, one column = {SLOT:?}");
    for w in 0..WORKERS {
        let row: String = (0..columns)
            .map(|c| {
                let at = SLOT * u32::try_from(c).unwrap_or(u32::MAX) + SLOT / 2;
                let busy = spans.iter().any(|s| s.0 == w && s.1 <= at && at < s.2);
                if busy {
                    '#'
                } else {
                    '.'
                }
            })
            .collect();
        println!("worker {w} (machine {}) {row}", w % 2);
    }
    // The most holders at any moment, from the recorded spans.
    let most = spans
        .iter()
        .map(|a| spans.iter().filter(|b| b.1 <= a.1 && a.1 < b.2).count())
        .max()
        .unwrap_or(0);
    println!("at most {most} held at once (limit {PERMITS})");
    if most > PERMITS as usize {
        return Err("more holders than permits: this must never happen".into());
    }
    let mut tokens: Vec<u64> = spans.iter().map(|s| s.3).collect();
    tokens.sort_unstable();
    tokens.dedup();
    println!(
        "{} grants, {} distinct fencing tokens",
        spans.len(),
        tokens.len()
    );
    Ok(())
}
