//! Find a Redis server, or start a throw-away `redis-server` on a free
//! loopback port.

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The arguments every throw-away server gets: no persistence, in the
/// foreground, its log on stdout (where its readiness is read).
pub const QUIET: &[&str] = &[
    "--save",
    "",
    "--appendonly",
    "no",
    "--daemonize",
    "no",
    "--logfile",
    "",
];

/// A `redis-server` started by us, killed when dropped, with its data
/// directory in the system's temporary directory (never the working tree),
/// removed when dropped.
pub struct ThrowAwayServer {
    child: Child,
    port: u16,
    /// The arguments it was started with, to start it again.
    args: Vec<String>,
    ready_marker: String,
    /// Its own data directory, if it made one.
    dir: Option<PathBuf>,
}

impl ThrowAwayServer {
    /// Starts `redis-server` (or `$REDIS_SERVER`) on a free port with
    /// persistence off plus `extra` arguments, and waits until it logs that
    /// it is ready (up to `ready_within`). Its data directory is a fresh one in the system's temporary
    /// directory (`extra` may name another with `--dir`).
    pub fn start(extra: &[&str], ready_within: Duration) -> Result<Self, Box<dyn Error>> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let port_arg = port.to_string();
        let dir = temp_dir(&format!("redis-{port}"))?;
        let dir_arg = dir.to_string_lossy().into_owned();
        let mut args = vec!["--port", &port_arg, "--bind", "127.0.0.1"];
        args.extend_from_slice(QUIET);
        args.extend(["--dir", &dir_arg]);
        args.extend_from_slice(extra);
        match Self::launch(&args, port, "Ready to accept connections", ready_within) {
            Ok(mut server) => {
                server.dir = Some(dir);
                Ok(server)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Runs `redis-server args...` (its log on stdout), which will listen on
    /// `port`, and waits until a log line contains `ready_marker`.
    pub fn launch(
        args: &[&str],
        port: u16,
        ready_marker: &str,
        ready_within: Duration,
    ) -> Result<Self, Box<dyn Error>> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let child = spawn_and_wait(&args, port, ready_marker, ready_within)?;
        Ok(ThrowAwayServer {
            child,
            port,
            args,
            ready_marker: ready_marker.to_owned(),
            dir: None,
        })
    }

    /// Kills the server (`SIGKILL`: nothing is saved on the way) and starts
    /// it again with the same arguments, so on the same port and data
    /// directory: it loads whatever its persistence files hold.
    pub fn restart(&mut self, ready_within: Duration) -> Result<(), Box<dyn Error>> {
        self.kill();
        self.child = spawn_and_wait(&self.args, self.port, &self.ready_marker, ready_within)?;
        Ok(())
    }

    /// As [`restart`](Self::restart), with `extra` arguments after the
    /// first start's (for this start only).
    pub fn restart_with(
        &mut self,
        extra: &[&str],
        ready_within: Duration,
    ) -> Result<(), Box<dyn Error>> {
        self.kill();
        let mut args = self.args.clone();
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        self.child = spawn_and_wait(&args, self.port, &self.ready_marker, ready_within)?;
        Ok(())
    }

    /// Its data directory, when it made its own.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
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
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
/// Runs `redis-server args...` (its log on stdout), which will listen on
/// `port`, and waits until a log line contains `ready_marker`.
fn spawn_and_wait(
    args: &[String],
    port: u16,
    ready_marker: &str,
    ready_within: Duration,
) -> Result<Child, Box<dyn Error>> {
    let bin = server_binary();
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
    if rx.recv_timeout(ready_within).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("redis-server on port {port} did not become ready").into());
    }
    Ok(child)
}

/// The server binary the tests start: `$REDIS_SERVER`, else `redis-server`
/// on `PATH`.
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// The version of [`server_binary`] as `(major, minor)`, read once from its
/// `--version` (Redis and Valkey both print `v=X.Y.Z`); `None` when it
/// cannot be run or read.
pub fn server_version() -> Option<(u32, u32)> {
    static VERSION: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = Command::new(server_binary())
            .arg("--version")
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v = text.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
        let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
        Some((parts.next()??, parts.next()??))
    })
}

/// Arguments that let the tests use `DEBUG` (needed from Redis 7.0 on,
/// where it is off by default; earlier servers have it on and refuse the
/// option).
pub fn debug_args() -> &'static [&'static str] {
    match server_version() {
        Some((major, _)) if major < 7 => &[],
        _ => &["--enable-debug-command", "local"],
    }
}

/// A fresh, empty directory in the system's temporary directory.
pub fn temp_dir(name: &str) -> std::io::Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("redmutex-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
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
