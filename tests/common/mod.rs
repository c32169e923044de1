//! Test support: private `redis-server` processes on free loopback ports,
//! started per test and killed when dropped.
//!
//! Set `REDIS_SERVER` to use another binary. If none is found the test fails
//! with install instructions; it never skips. The server is killed when the
//! `Server` drops (the examples' `ThrowAwayServer` does it).

// Each test binary uses its own part of this module, and test support fails
// loudly: a panic here is a failed test, which is the point.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods
)]

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redmutex::{Builder, Locker};

// The examples' throw-away server, so the start-up logic exists once.
#[path = "../../examples/support/mod.rs"]
mod support;

/// How long a server may take to say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `redis-server`, killed on drop.
pub struct Server {
    inner: support::ThrowAwayServer,
}

impl Server {
    /// Starts a server with persistence off and `DEBUG` enabled.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with extra command-line arguments.
    pub fn start_with(extra: &[&str]) -> Server {
        let mut args = vec!["--enable-debug-command", "local"];
        args.extend_from_slice(extra);
        let mut last = String::new();
        // A port found free can be taken by another test before the server
        // binds it: try a few ports.
        for _ in 0..5 {
            match support::ThrowAwayServer::start(&args, START_TIMEOUT) {
                Ok(inner) => return Server { inner },
                Err(e) if e.to_string().starts_with("cannot run") => {
                    panic!("the tests need a real Redis server: {e}")
                }
                Err(e) => last = e.to_string(),
            }
        }
        panic!("could not start redis-server: {last}");
    }

    pub fn port(&self) -> u16 {
        self.inner.port()
    }

    pub fn url(&self) -> String {
        self.inner.url()
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

    /// An r2d2 pool of `size` connections with no socket timeouts (as r2d2
    /// makes them) and no checkout ping, so the locker's own bounds are what
    /// a test sees.
    pub fn bare_pool(&self, size: u32) -> r2d2::Pool<redis::Client> {
        r2d2::Pool::builder()
            .max_size(size)
            .test_on_check_out(false)
            .build(redis::Client::open(self.url()).unwrap())
            .unwrap()
    }

    /// Calls of EVALSHA the server has run so far (failed attempts included).
    pub fn evalsha_calls(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    }

    /// Freezes the server process (`SIGSTOP`): connections stay open, nothing answers.
    pub fn pause(&self) {
        signal(self.inner.pid(), "-STOP");
    }

    /// Resumes a paused server (`SIGCONT`).
    pub fn resume(&self) {
        signal(self.inner.pid(), "-CONT");
    }

    /// Kills the server (`SIGKILL`) and waits for it to be gone.
    pub fn kill(&mut self) {
        self.inner.kill();
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

/// Starts `n` independent servers (Redlock masters).
pub fn servers(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

/// A builder over all `servers` as Redlock instances, each with its own pool.
pub fn redlock_builder(servers: &[Server]) -> Builder {
    let mut b: Option<Builder> = None;
    for s in servers {
        let pool = redmutex::pool(&s.url()).unwrap();
        b = Some(match b {
            None => Locker::builder(pool),
            Some(b) => b.instance(pool),
        });
    }
    b.expect("at least one server")
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
