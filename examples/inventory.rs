//! The stock example from the seeds: workers sell from one stock count in
//! Redis, first without a lock (read, think, write: they oversell), then with
//! one (exactly the stock is sold).
//!
//! ```text
//! cargo run --example inventory
//! ```

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::error::Error;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use redis::Commands;
use redmutex::Locker;

const STOCK: u64 = 100;
const WORKERS: usize = 8;

/// One sale: read the stock, spend a moment on the order, write it back.
fn sell_one(conn: &mut redis::Connection, sold: &AtomicU64) -> redis::RedisResult<bool> {
    let left: u64 = conn.get("inventory:stock")?;
    if left == 0 {
        return Ok(false);
    }
    // The time between read and write is where unlocked sellers collide.
    #[allow(clippy::disallowed_methods)] // simulated work, not a wait for an event
    std::thread::sleep(Duration::from_millis(1));
    let _: () = conn.set("inventory:stock", left - 1)?;
    sold.fetch_add(1, Ordering::SeqCst);
    Ok(true)
}

fn run(url: &str, locker: Option<&Locker>) -> Result<u64, Box<dyn Error>> {
    let client = redis::Client::open(url)?;
    let _: () = client.get_connection()?.set("inventory:stock", STOCK)?;
    let sold = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(WORKERS));
    let mut workers = Vec::new();
    for i in 0..WORKERS {
        let mut conn = client.get_connection()?;
        let (sold, barrier, locker) = (Arc::clone(&sold), Arc::clone(&barrier), locker.cloned());
        workers.push(
            std::thread::Builder::new()
                .name(format!("seller-{i}"))
                .spawn(move || -> Result<(), redmutex::Error> {
                    barrier.wait();
                    loop {
                        let more = match &locker {
                            None => sell_one(&mut conn, &sold)?,
                            Some(locker) => {
                                let _guard = locker.lock("inventory:stock-lock")?;
                                sell_one(&mut conn, &sold)?
                            }
                        };
                        if !more {
                            return Ok(());
                        }
                    }
                })?,
        );
    }
    for w in workers {
        w.join().map_err(|_| "a seller panicked")??;
    }
    Ok(sold.load(Ordering::SeqCst))
}

fn main() -> Result<(), Box<dyn Error>> {
    let (url, _server) = support::redis_url()?;
    println!("{WORKERS} workers sell from a stock of {STOCK}");

    let unlocked = run(&url, None)?;
    println!(
        "without a lock: sold {unlocked}, oversold by {}",
        unlocked.saturating_sub(STOCK)
    );

    let locker = Locker::open(&url)?;
    let locked = run(&url, Some(&locker))?;
    println!(
        "with redmutex:  sold {locked}, oversold by {}",
        locked.saturating_sub(STOCK)
    );
    if locked != STOCK {
        return Err("the lock let two sellers in".into());
    }
    Ok(())
}
