//! What the tests of the `redmutex` command share: a throw-away
//! `redis-server`, a scratch directory, and the command itself.
#![allow(dead_code)] // each test binary uses some of these helpers
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests poll with short sleeps

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use redmutex_testkit::{temp_dir, ThrowAwayServer};

pub struct Setup {
    pub server: ThrowAwayServer,
    pub dir: PathBuf,
}

pub fn setup(name: &str) -> Setup {
    let server = ThrowAwayServer::start(&[], Duration::from_secs(20)).unwrap_or_else(|e| {
        panic!("the tests need redis-server (Debian: apt-get install redis-server): {e}")
    });
    Setup {
        server,
        dir: temp_dir(name).unwrap(),
    }
}

impl Setup {
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_redmutex"));
        c.args(args)
            .env("REDIS_URL", self.server.url())
            .env("OUT", self.dir.join("out"))
            .env("READY", self.dir.join("ready"))
            .env("PID", self.dir.join("pid"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Spawns `redmutex` with a child that writes `$READY` (see `RUNS`),
    /// and returns once the child has started: the lock is held.
    pub fn start(&self, args: &[&str]) -> Child {
        let run = self.cmd(args).spawn().unwrap();
        wait_for("the child started", || self.file("ready").exists());
        run
    }

    /// As [`Setup::start`], with more environment variables.
    pub fn start_with(&self, args: &[&str], env: &[(&str, PathBuf)]) -> Child {
        let mut cmd = self.cmd(args);
        for (name, value) in env {
            cmd.env(name, value);
        }
        let run = cmd.spawn().unwrap();
        wait_for("the child started", || self.file("ready").exists());
        run
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.server.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Polls (bounded) until `check` holds.
pub fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < end, "not within 20 s: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a spawned `redmutex` and returns its output.
pub fn finish(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

/// Waits (up to 30 s) for a spawned `redmutex` whose output is not piped,
/// or is read elsewhere; kills it and panics when it does not end.
pub fn finish_within(mut child: Child) -> std::process::ExitStatus {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redmutex did not end within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` is alive (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

/// The pid a job wrote to `$PID` (see `RUNS`).
pub fn job_pid(s: &Setup) -> u32 {
    std::fs::read_to_string(s.file("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

impl Drop for Setup {
    /// Kills what a failed test may have left running: the process group
    /// of the job that wrote `$PID`.
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.file("pid")) {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", pid.trim())])
                .stderr(Stdio::null())
                .status();
        }
    }
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// A child that says it started, then runs until stopped.
pub const RUNS: &str =
    "echo $$ > \"$PID\"; echo started > \"$READY\"; while true; do sleep 0.05; done";

/// SIGTERM to a process (the command forwards it to its child's group).
pub fn nix_term(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

/// The environment variable `name` parsed, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
