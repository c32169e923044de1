//! A job that must run on one host at a time, as cron would start it on every
//! host at once: the first takes the lock and runs; the others see it busy and
//! exit quietly.
//!
//! ```text
//! cargo run --example cron
//! ```

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::error::Error;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use redmutex::Locker;

/// What one host's cron entry runs. Returns whether this host did the work.
fn nightly_job(url: &str, host: &str, start_together: &Barrier) -> Result<bool, redmutex::Error> {
    let locker = Locker::builder(redmutex::pool(url)?)
        .prefix("cron")
        .metadata(format!("nightly job on {host}"))
        .ttl(Duration::from_secs(10)) // a crashed host frees the job after 10 s
        .build()?;
    start_together.wait();
    let Some(guard) = locker.try_lock("nightly-report")? else {
        // Someone else has it: exit quietly, like a cron job should.
        return Ok(false);
    };
    for step in ["collect", "render", "mail"] {
        guard.ensure_held()?; // stop before a step if the lease is gone
        println!("{host}: {step} (fencing token {})", guard.fencing_token());
    }
    // Hold until every host has tried, so the demo shows the others skip.
    start_together.wait();
    guard.unlock()?;
    Ok(true)
}

fn main() -> Result<(), Box<dyn Error>> {
    let (url, _server) = support::redis_url()?;
    let hosts = ["web-1", "web-2", "web-3"];
    let barrier = Arc::new(Barrier::new(hosts.len()));
    let runs: Vec<_> = hosts
        .iter()
        .map(|host| {
            let (url, barrier, host) = (url.clone(), Arc::clone(&barrier), host.to_string());
            std::thread::Builder::new()
                .name(host.clone())
                .spawn(move || {
                    let ran = nightly_job(&url, &host, &barrier);
                    // The winner waits at the second barrier; the others join it there.
                    if !matches!(ran, Ok(true)) {
                        barrier.wait();
                    }
                    (host, ran)
                })
        })
        .collect::<Result<_, _>>()?;
    let mut ran = 0;
    for run in runs {
        let (host, result) = run.join().map_err(|_| "a host thread panicked")?;
        match result? {
            true => ran += 1,
            false => println!("{host}: another host is running the job, exiting quietly"),
        }
    }
    println!("the job ran on {ran} of {} hosts", hosts.len());
    if ran != 1 {
        return Err("the job must run exactly once".into());
    }
    Ok(())
}
