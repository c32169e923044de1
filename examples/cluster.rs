//! Locks on a Redis Cluster: each lock lives on the shard that owns its
//! key's hash slot, and the keys of one `lock_all` must share a slot (hash
//! tags: `{order42}:stock`, `{order42}:invoice`). The example starts three
//! throw-away cluster nodes, gives each a third of the slots, and locks
//! with `Locker::open_cluster`.
//!
//! ```text
//! cargo run --example cluster
//! ```

// Throw-away servers (the crate's test support).
use redmutex_testkit as support;

use std::error::Error;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use redmutex::Locker;
use support::ThrowAwayServer;

const READY: Duration = Duration::from_secs(20);
/// Redis Cluster's hash slots.
const SLOTS: u16 = 16384;

fn main() -> Result<(), Box<dyn Error>> {
    let dir = support::temp_dir("cluster-example")?;
    let nodes = (0..3)
        .map(|_| start_node(&dir))
        .collect::<Result<Vec<_>, _>>()?;
    form_cluster(&nodes)?;
    let urls: Vec<String> = nodes.iter().map(ThrowAwayServer::url).collect();
    println!("a cluster of three masters: {urls:?}");

    // What an application writes: some nodes' URLs (the rest are found).
    let locker = Locker::open_cluster(&urls)?;
    let guard = locker.lock_all(["{order42}:stock", "{order42}:invoice"])?;
    println!(
        "locked {:?} on one shard: fencing token {}",
        guard.keys(),
        guard.fencing_token()
    );
    if let Some(info) = locker.holder("{order42}:stock")? {
        println!("held by {:?}, {:?} left", info.metadata(), info.ttl());
    }
    guard.unlock()?;

    // Keys in different slots cannot be locked together.
    match locker.lock_all(["order42:stock", "order43:stock"]) {
        Err(e) => println!("two slots at once: {e}"),
        Ok(_) => return Err("locked keys of two slots at once".into()),
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A cluster-enabled node on a free port whose bus port (+10000) is free.
fn start_node(dir: &std::path::Path) -> Result<ThrowAwayServer, Box<dyn Error>> {
    let port = loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if port < 55000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            break port;
        }
    };
    let (p, conf) = (port.to_string(), format!("nodes-{port}.conf"));
    let d = dir.to_string_lossy().into_owned();
    let mut args = vec!["--port", &p, "--bind", "127.0.0.1", "--dir", &d];
    args.extend_from_slice(support::QUIET);
    args.extend(["--cluster-enabled", "yes", "--cluster-config-file", &conf]);
    ThrowAwayServer::launch(&args, port, "Ready to accept connections", READY)
}

/// Gives each node an equal share of the slots, introduces them to each
/// other, and waits until every node says the cluster is ok (nothing
/// announces it: this asks every 50 ms, for up to 20 s).
#[allow(clippy::disallowed_methods)] // polling a state that sends no event
fn form_cluster(nodes: &[ThrowAwayServer]) -> Result<(), Box<dyn Error>> {
    let mut conns = nodes
        .iter()
        .map(|n| redis::Client::open(n.url())?.get_connection())
        .collect::<Result<Vec<_>, _>>()?;
    let share = SLOTS.div_ceil(u16::try_from(nodes.len())?);
    for (i, conn) in conns.iter_mut().enumerate() {
        let first = u16::try_from(i)? * share;
        let slots: Vec<u16> = (first..SLOTS.min(first + share)).collect();
        redis::cmd("CLUSTER")
            .arg("ADDSLOTS")
            .arg(&slots)
            .query::<()>(conn)?;
    }
    if let Some(first) = conns.first_mut() {
        for node in nodes.iter().skip(1) {
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .query::<()>(first)?;
        }
    }
    let start = Instant::now();
    loop {
        let mut ok = true;
        for conn in &mut conns {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(conn)?;
            ok &= info.lines().any(|l| l.trim() == "cluster_state:ok");
        }
        if ok {
            return Ok(());
        }
        if start.elapsed() > READY {
            return Err("the cluster did not form".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
