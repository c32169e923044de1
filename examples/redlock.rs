//! Redlock over three independent local masters: a lock needs two of them.
//! The example starts three throw-away `redis-server`s, takes a lock, kills
//! one master, and shows that locking goes on with the other two, paying
//! the dead master's timeout once (it is then skipped for a while, and
//! tried again later).
//!
//! ```text
//! cargo run --example redlock
//! ```

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::error::Error;
use std::time::{Duration, Instant};

use redmutex::Locker;
use support::ThrowAwayServer;

fn main() -> Result<(), Box<dyn Error>> {
    let start = || ThrowAwayServer::start(&[], Duration::from_secs(20));
    // An array, so indexing it with a constant is checked when compiling.
    let mut masters: [ThrowAwayServer; 3] = [start()?, start()?, start()?];
    let ports = masters.each_ref().map(ThrowAwayServer::port);
    println!("started three independent masters on ports {ports:?}");

    let locker = Locker::builder(redmutex::pool(&masters[0].url())?)
        .instance(redmutex::pool(&masters[1].url())?)
        .instance(redmutex::pool(&masters[2].url())?)
        .ttl(Duration::from_secs(5))
        .build()?;

    let start = Instant::now();
    let guard = locker.lock("redlock-demo")?;
    println!(
        "locked on a majority in {:?}: fencing token {}",
        start.elapsed(),
        guard.fencing_token()
    );
    let token = guard.fencing_token();
    guard.unlock()?;

    masters[0].kill();
    println!("killed the master on port {}", ports[0]);

    let start = Instant::now();
    let guard = locker.lock("redlock-demo")?;
    println!(
        "locked again on the 2 survivors in {:?}: fencing token {} (> {token})",
        start.elapsed(),
        guard.fencing_token()
    );
    guard.unlock()?;
    // While its break lasts, the dead master is not asked (nor waited for).
    let start = Instant::now();
    for _ in 0..10 {
        locker.lock("redlock-demo")?.unlock()?;
    }
    println!(
        "10 more lock + unlock cycles in {:?}: the dead master is skipped, \
         not waited for, until its break is over",
        start.elapsed()
    );

    masters[1].kill();
    println!("killed the master on port {}: 1 of 3 left", ports[1]);
    match locker.try_lock("redlock-demo") {
        Err(redmutex::Error::NoQuorum {
            granted, needed, ..
        }) => {
            println!("no quorum, as it should be: {granted} granted, {needed} needed");
        }
        other => return Err(format!("expected NoQuorum, got {other:?}").into()),
    }
    Ok(())
}
