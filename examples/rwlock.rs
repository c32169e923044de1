//! A read-write lock shared by 6 readers and 2 writers over two lockers
//! (two "machines"): readers share the lock, a writer has it alone, and a
//! waiting writer stops the readers who come after it. Each row is a
//! worker, each column 10 ms; `r` marks a read hold, `W` the write hold.
//!
//! ```text
//! cargo run --example rwlock
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

const READERS: usize = 6;
const WRITERS: usize = 2;
const SLOT: Duration = Duration::from_millis(10);

/// One recorded hold: worker, write or read, from, until, fencing token.
type Span = (usize, bool, Duration, Duration, u64);

/// The work done under a hold.
fn work(slots: u32) {
    #[allow(clippy::disallowed_methods)] // simulated work, not a wait for an event
    std::thread::sleep(slots * SLOT);
}

fn main() -> Result<(), Box<dyn Error>> {
    let (url, _server) = support::redis_url()?;
    let machines = [Locker::open(&url)?, Locker::open(&url)?];
    let name = format!("example:config:{}", std::process::id());
    let start = Instant::now();
    let spans: Arc<Mutex<Vec<Span>>> = Arc::new(Mutex::new(Vec::new()));

    let mut workers = Vec::new();
    for w in 0..READERS + WRITERS {
        let writer = w >= READERS;
        let config = machines.get(w % 2).ok_or("no machine")?.rwlock(&name)?;
        let spans = Arc::clone(&spans);
        workers.push(
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || -> Result<(), redmutex::Error> {
                    for round in 0..3 {
                        // Writers come a little later than the readers.
                        work(if writer { 2 + 4 * round } else { 1 });
                        let hold = if writer {
                            config.write()?
                        } else {
                            config.read()?
                        };
                        let from = start.elapsed();
                        work(if writer { 3 } else { 4 });
                        hold.ensure_held()?;
                        let until = start.elapsed();
                        let token = hold.fencing_token();
                        hold.unlock()?;
                        if let Ok(mut spans) = spans.lock() {
                            spans.push((w, writer, from, until, token));
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
    let end = spans.iter().map(|s| s.3).max().unwrap_or_default();
    let columns = end.as_millis() / SLOT.as_millis() + 1;
    println!("{READERS} readers, {WRITERS} writers, one column = {SLOT:?}");
    for w in 0..READERS + WRITERS {
        let row: String = (0..columns)
            .map(|c| {
                let at = SLOT * u32::try_from(c).unwrap_or(u32::MAX) + SLOT / 2;
                match spans.iter().find(|s| s.0 == w && s.2 <= at && at < s.3) {
                    Some(s) if s.1 => 'W',
                    Some(_) => 'r',
                    None => '.',
                }
            })
            .collect();
        let kind = if w >= READERS { "writer" } else { "reader" };
        println!("{kind} {w} (machine {}) {row}", w % 2);
    }
    // From the recorded spans: readers together, a writer alone.
    let overlap = |a: &Span, b: &Span| a.2 < b.3 && b.2 < a.3;
    let most_readers = spans
        .iter()
        .filter(|a| !a.1)
        .map(|a| {
            spans
                .iter()
                .filter(|b| !b.1 && b.2 <= a.2 && a.2 < b.3)
                .count()
        })
        .max()
        .unwrap_or(0);
    let clashes = spans
        .iter()
        .filter(|a| a.1)
        .map(|a| spans.iter().filter(|b| b.0 != a.0 && overlap(a, b)).count())
        .sum::<usize>();
    println!("at most {most_readers} readers at once; {clashes} holds beside a writer");
    if clashes > 0 {
        return Err("a writer shared the lock: this must never happen".into());
    }
    let mut tokens: Vec<u64> = spans.iter().map(|s| s.4).collect();
    tokens.sort_unstable();
    tokens.dedup();
    println!(
        "{} holds, {} distinct fencing tokens",
        spans.len(),
        tokens.len()
    );
    Ok(())
}
