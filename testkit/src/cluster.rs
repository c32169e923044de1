//! A throw-away Redis Cluster: `redis-server --cluster-enabled yes` nodes on
//! free loopback ports, joined by `redis-cli --cluster create`.

use std::error::Error;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::server::{debug_args, temp_dir, ThrowAwayServer, QUIET};

/// A free port whose cluster bus port (port + 10000) is free too.
pub fn cluster_port() -> Result<u16, Box<dyn Error>> {
    loop {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        if port < 55000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return Ok(port);
        }
    }
}

/// Starts `3 * (1 + replicas)` cluster nodes (3 masters, `replicas`
/// replicas each; `extra` arguments for every node), joins them, and
/// waits (30 s at most) until each says `cluster_state:ok`. Returns the
/// nodes (killed when dropped) and the directory of their files (the
/// caller removes it).
pub fn start_cluster(
    replicas: usize,
    extra: &[&str],
    ready_within: Duration,
) -> Result<(Vec<ThrowAwayServer>, PathBuf), Box<dyn Error>> {
    start(replicas, extra, None, ready_within)
}

/// As [`start_cluster`] with 3 masters and no replicas, over TLS only:
/// each node listens on a TLS port (its `port()`; no plain port) and
/// speaks TLS on the cluster bus too. `tls` are the nodes' TLS arguments
/// (`--tls-cert-file`, `--tls-key-file`, `--tls-ca-cert-file`, ...), `cli`
/// the ones `redis-cli` needs to reach them (`--tls --cacert <file>`).
pub fn start_tls_cluster(
    tls: &[&str],
    cli: &[&str],
    ready_within: Duration,
) -> Result<(Vec<ThrowAwayServer>, PathBuf), Box<dyn Error>> {
    start(0, tls, Some(cli), ready_within)
}

/// [`start_cluster`], over TLS when `tls_cli` is given (see
/// [`start_tls_cluster`]).
fn start(
    replicas: usize,
    extra: &[&str],
    tls_cli: Option<&[&str]>,
    ready_within: Duration,
) -> Result<(Vec<ThrowAwayServer>, PathBuf), Box<dyn Error>> {
    let dir = temp_dir("cluster")?;
    let d = dir.to_string_lossy().into_owned();
    let cli = tls_cli.unwrap_or_default();
    let mut nodes = Vec::new();
    for _ in 0..3 * (1 + replicas) {
        let port = cluster_port()?;
        let (p, conf) = (port.to_string(), format!("nodes-{port}.conf"));
        let mut args = match tls_cli {
            None => vec!["--port", &p],
            Some(_) => vec!["--port", "0", "--tls-port", &p, "--tls-cluster", "yes"],
        };
        args.extend(["--bind", "127.0.0.1"]);
        args.extend_from_slice(QUIET);
        args.extend(["--dir", &d, "--cluster-enabled", "yes"]);
        args.extend(["--cluster-config-file", &conf]);
        args.extend_from_slice(debug_args());
        args.extend_from_slice(extra);
        nodes.push(ThrowAwayServer::launch(
            &args,
            port,
            "Ready to accept connections",
            ready_within,
        )?);
    }
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let out = Command::new("redis-cli")
        .args(cli)
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .map_err(|e| format!("redis-cli (Debian: apt-get install redis-tools): {e}"))?;
    if !out.status.success() {
        return Err(format!("redis-cli --cluster create failed: {out:?}").into());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        loop {
            let info = Command::new("redis-cli")
                .args(cli)
                .args(["-p", &node.port().to_string(), "cluster", "info"])
                .output()?;
            let info = String::from_utf8_lossy(&info.stdout);
            if info.lines().any(|l| l.trim() == "cluster_state:ok") {
                break;
            }
            if Instant::now() > deadline {
                return Err("the cluster did not come up within 30 s".into());
            }
            let (_tx, rx) = std::sync::mpsc::channel::<()>();
            let _ = rx.recv_timeout(Duration::from_millis(20));
        }
    }
    Ok((nodes, dir))
}
