//! Leader election: three worker processes campaign; one leads and
//! proclaims its address; it is killed (SIGKILL: no resignation, its lease
//! just stops being renewed), and another takes over within a TTL; an
//! observer prints each change.
//!
//! ```text
//! cargo run --example leader
//! ```
//!
//! Uses `REDIS_URL` when set; otherwise Redis on 127.0.0.1:6379; otherwise it
//! starts a throw-away `redis-server` and says so. The workers are this
//! example run again as child processes (`leader worker <n> <url>`).

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::error::Error;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use redmutex::Locker;

/// A short lease, so that a killed leader is replaced within seconds.
const TTL: Duration = Duration::from_secs(2);
const ELECTION: &str = "leader-example";

fn locker(url: &str) -> Result<Locker, Box<dyn Error>> {
    Ok(Locker::builder(redmutex::pool(url)?).ttl(TTL).build()?)
}

/// One worker: campaigns, and once it leads, says where it serves and
/// leads until its lease is lost (or it is killed).
fn worker(n: &str, url: &str) -> Result<(), Box<dyn Error>> {
    let election = locker(url)?.election(ELECTION)?;
    election.lead(format!("worker {n}: starting"), |leadership| {
        println!("  worker {n}: leading, term {}", leadership.term());
        // ... bind a listener, then tell everyone where it is ...
        if let Err(e) = leadership.proclaim(format!("worker {n} at 127.0.0.1:900{n}")) {
            eprintln!("  worker {n}: proclaim failed: {e}");
        }
        while !leadership.wait_lost(Duration::from_secs(60)) {}
        println!("  worker {n}: lost the lead");
    })?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, n, url] = args.as_slice() {
        if role == "worker" {
            return worker(n, url);
        }
    }
    let (url, _server) = support::redis_url()?;
    let election = locker(&url)?.election(ELECTION)?;
    let observer = election.observe()?;

    let me = std::env::current_exe()?;
    let mut workers: Vec<(String, Child)> = Vec::new();
    for n in 1..=3 {
        let child = Command::new(&me)
            .args(["worker", &n.to_string(), &url])
            .spawn()?;
        workers.push((format!("worker {n} "), child));
    }

    let start = Instant::now();
    let mut killed: Option<(String, Instant)> = None;
    for change in observer {
        let at = start.elapsed().as_millis();
        let Some(leader) = change? else {
            println!("[{at:>5} ms] observer: no leader");
            continue;
        };
        println!(
            "[{at:>5} ms] observer: {:?} leads, term {}",
            leader.value(),
            leader.term()
        );
        if !leader.value().contains(" at ") {
            continue; // still starting: wait for its address
        }
        match &killed {
            None => {
                // Kill the leader: no resignation, its lease runs out.
                let who = workers
                    .iter_mut()
                    .find(|(name, _)| leader.value().starts_with(name.as_str()));
                if let Some((name, child)) = who {
                    child.kill()?;
                    child.wait()?;
                    println!("[{at:>5} ms] killed {}(SIGKILL)", name);
                    killed = Some((name.clone(), Instant::now()));
                }
            }
            Some((name, when)) if !leader.value().starts_with(name.as_str()) => {
                println!(
                    "{} took over {} ms after the kill (TTL {} ms)",
                    leader.value().split(" at ").next().unwrap_or(""),
                    when.elapsed().as_millis(),
                    TTL.as_millis()
                );
                break;
            }
            Some(_) => {}
        }
    }
    for (_, child) in &mut workers {
        let _ = child.kill();
        let _ = child.wait();
    }
    Ok(())
}
