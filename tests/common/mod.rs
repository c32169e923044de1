//! Test support: private `redis-server` processes on free loopback ports,
//! started per test and killed when dropped.
//!
//! Set `REDIS_SERVER` to use another binary. If none is found the test fails
//! with install instructions; it never skips.
#![allow(dead_code)]
// each test binary uses its own part of this module
// Test support fails loudly: a panic here is a failed test, which is the point.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods
)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redmutex::{Builder, Locker};

/// How long a server may take to say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `redis-server`, killed on drop.
pub struct Server {
    child: Child,
    port: u16,
}

fn binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

impl Server {
    /// Starts a server with persistence off and `DEBUG` enabled.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with extra command-line arguments.
    pub fn start_with(extra: &[&str]) -> Server {
        let mut last = String::new();
        // A port found free can be taken before the server binds it: retry.
        for _ in 0..5 {
            let port = free_port();
            match Server::try_start(port, extra) {
                Ok(s) => return s,
                Err(e) => last = e,
            }
        }
        panic!("could not start redis-server: {last}");
    }

    fn try_start(port: u16, extra: &[&str]) -> Result<Server, String> {
        let bin = binary();
        let mut child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "local", "--loglevel", "notice"])
            .args(["--logfile", ""])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run `{bin}` ({e}). The tests need a real Redis server: \
                     install it (Debian/Ubuntu: `apt-get install redis-server`, \
                     macOS: `brew install redis`) or set REDIS_SERVER to its path."
                )
            });
        // Wait for the server's own word that it is ready, not for a timer.
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("redis-{port}-log"))
            .spawn(move || {
                let mut ready_sent = false;
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if !ready_sent && line.contains("Ready to accept connections") {
                        let _ = tx.send(Ok(()));
                        ready_sent = true;
                    } else if !ready_sent && (line.contains("# ") && line.contains("rror")) {
                        let _ = tx.send(Err(line));
                    }
                }
                if !ready_sent {
                    let _ = tx.send(Err("redis-server exited before it was ready".into()));
                }
            })
            .expect("spawn log reader");
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(Ok(())) => Ok(Server { child, port }),
            Ok(Err(e)) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(e)
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!("not ready within {START_TIMEOUT:?}"))
            }
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A plain connection for the test's own inspection and tampering.
    pub fn conn(&self) -> redis::Connection {
        let c = redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c
    }

    /// A locker over its own pool (as a separate process would have).
    pub fn locker(&self) -> Locker {
        Locker::open(&self.url()).unwrap()
    }

    /// A builder over its own pool.
    pub fn builder(&self) -> Builder {
        Locker::builder(redmutex::pool(&self.url()).unwrap())
    }

    /// Freezes the server process (`SIGSTOP`): connections stay open, nothing answers.
    pub fn pause(&self) {
        signal(self.child.id(), "-STOP");
    }

    /// Resumes a paused server (`SIGCONT`).
    pub fn resume(&self) {
        signal(self.child.id(), "-CONT");
    }

    /// Kills the server (`SIGKILL`) and waits for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill {sig} {pid} failed");
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A unique key name for this test (tests share no keys, servers or state).
pub fn key(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// Runs `f` and returns its result with how long it took.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// Subscribes to keyspace events of `key` (`flags` as in
/// `notify-keyspace-events`, e.g. "Kg" for generic commands such as PEXPIRE
/// and DEL, "Kx" for expiries) and returns a receiver of event names.
pub fn keyspace_events(server: &Server, key: &str, flags: &str) -> mpsc::Receiver<String> {
    let mut admin = server.conn();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(flags)
        .exec(&mut admin)
        .unwrap();
    let mut conn = server.conn();
    conn.set_read_timeout(None).unwrap();
    let channel = format!("__keyspace@0__:{key}");
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("keyspace-events".into())
        .spawn(move || {
            let mut pubsub = conn.as_pubsub();
            pubsub.subscribe(&channel).unwrap();
            ready_tx.send(()).unwrap();
            while let Ok(msg) = pubsub.get_message() {
                let event: String = msg.get_payload().unwrap_or_default();
                if tx.send(event).is_err() {
                    return;
                }
            }
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    rx
}

/// Waits for the next keyspace event named `want`, skipping others.
pub fn next_event(rx: &mpsc::Receiver<String>, want: &str, within: Duration) {
    let end = Instant::now() + within;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(e) if e == want => return,
            Ok(_) => continue,
            Err(e) => panic!("no {want:?} event within {within:?}: {e}"),
        }
    }
}
