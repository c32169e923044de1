//! Locks on a master that Redis Sentinel watches: the locker asks the
//! sentinels where the master is, so after a failover new connections reach
//! the promoted replica. The example starts a master, a replica and one
//! sentinel (throw-away `redis-server`s), then locks with
//! `Locker::open_sentinel`, and with `min_replicas(1)` through
//! `sentinel_pool`, so that a grant counts only once the replica has it.
//!
//! ```text
//! cargo run --example sentinel
//! ```

// Throw-away servers (the crate's test support).
use redmutex_testkit as support;

use std::error::Error;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use redmutex::Locker;
use support::ThrowAwayServer;

const READY: Duration = Duration::from_secs(20);

fn main() -> Result<(), Box<dyn Error>> {
    // No 5 s pause before a replica's first sync (Redis's default).
    let master = ThrowAwayServer::start(&["--repl-diskless-sync-delay", "0"], READY)?;
    let master_port = master.port().to_string();
    let replica = ThrowAwayServer::start(&["--replicaof", "127.0.0.1", &master_port], READY)?;
    let sentinel = start_sentinel(master.port())?;
    println!(
        "master on {}, replica on {}, sentinel on {} (watching \"mymaster\")",
        master.port(),
        replica.port(),
        sentinel.port()
    );

    // What an application writes: the sentinels' URLs and the master's name.
    let locker = Locker::open_sentinel([sentinel.url()], "mymaster")?;
    let guard = locker.lock("sentinel-demo:report")?;
    println!(
        "locked {:?} on the master the sentinel names: fencing token {}",
        guard.keys(),
        guard.fencing_token()
    );
    drop(guard);

    // With a replica that must hold every grant before it counts (see the
    // crate docs' "Topologies and what they promise").
    wait_for_replica(&replica)?;
    let pool = redmutex::sentinel_pool([sentinel.url()], "mymaster")?;
    let replicated = Locker::builder(pool).min_replicas(1).build()?;
    let guard = replicated.lock("sentinel-demo:payments")?;
    println!(
        "locked {:?} with 1 replica acknowledging: fencing token {}",
        guard.keys(),
        guard.fencing_token()
    );
    guard.unlock()?;
    println!("unlocked");
    Ok(())
}

/// One sentinel watching the master at `port` as "mymaster" (quorum 1),
/// ready once it says it monitors it.
fn start_sentinel(master_port: u16) -> Result<ThrowAwayServer, Box<dyn Error>> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = support::temp_dir("sentinel-example")?;
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile \"\"\ndir {}\n\
             sentinel monitor mymaster 127.0.0.1 {master_port} 1\n",
            dir.display()
        ),
    )?;
    let conf = conf.to_string_lossy().into_owned();
    ThrowAwayServer::launch(&[&conf, "--sentinel"], port, "+monitor master", READY)
}

/// Waits until the replica's link to its master is up: nothing announces
/// it, so this asks every 50 ms, for up to 20 s.
#[allow(clippy::disallowed_methods)] // polling a state that sends no event
fn wait_for_replica(replica: &ThrowAwayServer) -> Result<(), Box<dyn Error>> {
    let mut conn = redis::Client::open(replica.url())?.get_connection()?;
    let start = Instant::now();
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut conn)?;
        if info.lines().any(|l| l.trim() == "master_link_status:up") {
            return Ok(());
        }
        if start.elapsed() > READY {
            return Err("the replica did not connect to its master".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
