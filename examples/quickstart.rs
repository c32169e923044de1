//! The quick start: take a lock, look at it from another "process", release it.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! Uses `REDIS_URL` when set; otherwise Redis on 127.0.0.1:6379; otherwise it
//! starts a throw-away `redis-server` and says so.

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::error::Error;

use redmutex::Locker;

fn main() -> Result<(), Box<dyn Error>> {
    let (url, _server) = support::redis_url()?;

    // Two lockers with their own pools stand in for two machines.
    let here = Locker::open(&url)?;
    let elsewhere = Locker::open(&url)?;

    let guard = here.lock("quickstart:nightly-report")?;
    println!(
        "locked {:?} with fencing token {}",
        guard.keys(),
        guard.fencing_token()
    );

    if let Some(info) = elsewhere.holder("quickstart:nightly-report")? {
        println!(
            "elsewhere sees it held by {:?}, {:?} left on the lease",
            info.metadata(),
            info.ttl()
        );
    }
    match elsewhere.try_lock("quickstart:nightly-report")? {
        Some(_) => return Err("two holders: this must never happen".into()),
        None => println!("elsewhere's try_lock: busy, as it should be"),
    }

    guard.ensure_held()?; // no round trip: the watchdog keeps it current
    guard.unlock()?; // the checked release; dropping the guard also releases
    println!("unlocked");

    let again = elsewhere.try_lock("quickstart:nightly-report")?;
    println!(
        "elsewhere's try_lock after release: {}",
        match &again {
            Some(g) => format!("ours, fencing token {} (larger)", g.fencing_token()),
            None => "busy".to_owned(),
        }
    );
    Ok(())
}
