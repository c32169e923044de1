//! Shared by the examples (and the test support code): find a Redis server,
//! or start a throw-away `redis-server` on a free loopback port.
#![allow(dead_code)] // each example uses its own part of this module

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A `redis-server` started by us, killed when dropped.
pub struct ThrowAwayServer {
    child: Child,
    port: u16,
}

impl ThrowAwayServer {
    /// Starts `redis-server` (or `$REDIS_SERVER`) on a free port with
    /// persistence off plus `extra` arguments, and waits until it logs that
    /// it is ready (up to `ready_within`).
    pub fn start(extra: &[&str], ready_within: Duration) -> Result<Self, Box<dyn Error>> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let port_arg = port.to_string();
        let mut args = vec!["--port", &port_arg, "--bind", "127.0.0.1"];
        args.extend(["--save", "", "--appendonly", "no", "--daemonize", "no"]);
        args.extend(["--logfile", ""]);
        args.extend_from_slice(extra);
        Self::launch(&args, port, "Ready to accept connections", ready_within)
    }

    /// Runs `redis-server args...` (its log on stdout), which will listen on
    /// `port`, and waits until a log line contains `ready_marker`.
    pub fn launch(
        args: &[&str],
        port: u16,
        ready_marker: &str,
        ready_within: Duration,
    ) -> Result<Self, Box<dyn Error>> {
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let mut child = Command::new(&bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot run `{bin}` ({e}): install Redis (Debian/Ubuntu: \
                     `apt-get install redis-server`, macOS: `brew install redis`) \
                     or set REDIS_SERVER to the redis-server binary"
                )
            })?;
        let stdout = child
            .stdout
            .take()
            .ok_or("redis-server stdout not captured")?;
        // Wait for the server's own word that it is ready, not for a timer.
        let (tx, rx) = mpsc::channel();
        let marker = ready_marker.to_owned();
        std::thread::Builder::new()
            .name(format!("redis-{port}-log"))
            .spawn(move || {
                let mut told = false;
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if !told && line.contains(&marker) {
                        told = tx.send(()).is_ok();
                    }
                }
            })?;
        let mut server = ThrowAwayServer { child, port };
        if rx.recv_timeout(ready_within).is_err() {
            server.kill();
            return Err(format!("redis-server on port {port} did not become ready").into());
        }
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server and waits until it is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ThrowAwayServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `$REDIS_URL`; else a server answering on 127.0.0.1:6379; else a
/// throw-away server started here (returned, so it lives as long as needed).
pub fn redis_url() -> Result<(String, Option<ThrowAwayServer>), Box<dyn Error>> {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return Ok((url, None));
    }
    let default: SocketAddr = ([127, 0, 0, 1], 6379).into();
    if TcpStream::connect_timeout(&default, Duration::from_millis(300)).is_ok() {
        return Ok(("redis://127.0.0.1:6379/".to_owned(), None));
    }
    let server = ThrowAwayServer::start(&[], Duration::from_secs(20))?;
    println!(
        "REDIS_URL is not set and nothing answers on 127.0.0.1:6379: \
         started a throw-away redis-server on port {} (stopped at exit)",
        server.port()
    );
    Ok((server.url(), Some(server)))
}
