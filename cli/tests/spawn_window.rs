//! The supervisor killed with SIGKILL right after the job started, before
//! it has told its watcher anything about the job: the job must still be
//! stopped before the lease can run out. The window is made wide with
//! strace(1), which holds the supervisor's first `write(2)` (to the
//! watcher's pipe: Redis commands go by `sendto(2)`) for 10 s. Skipped
//! (with a message) where strace is missing or cannot trace.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn strace_works() -> bool {
    Command::new("strace")
        .args(["-qq", "-o", "/dev/null", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The supervisor held (not killed: strace restarts it only after the
/// delay) in its first write after the job's fork: it is stuck, renewing
/// nothing, and has told the watcher nothing.
#[test]
fn a_supervisor_stuck_before_it_told_the_watcher_leaves_no_job() {
    supervisor_stopped_at_first_write("inject=write:delay_enter=10000000:when=1", false);
}

/// The supervisor killed by SIGKILL at its first write after the job's
/// fork, before it could tell the watcher anything.
#[test]
fn a_supervisor_killed_before_it_told_the_watcher_leaves_no_job() {
    supervisor_stopped_at_first_write("inject=write:signal=KILL:when=1", true);
}

fn supervisor_stopped_at_first_write(inject: &str, killed: bool) {
    if !strace_works() {
        eprintln!("skipped: strace is missing or cannot trace here");
        return;
    }
    let s = setup("window");
    // The job says who its parent (the supervisor) is, and ignores TERM.
    let job = "trap '' TERM; echo $PPID > \"$OUT\"; sleep 1000 & ".to_owned() + RUNS;
    let run = Command::new("strace")
        .args([
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "trace=write",
            "-e",
            inject,
            env!("CARGO_BIN_EXE_redmutex"),
            "run",
            "--ttl",
            "3s",
            "wkey",
            "--",
            "sh",
            "-c",
            &job,
        ])
        .env("REDIS_URL", s.server.url())
        .env("OUT", s.file("out"))
        .env("READY", s.file("ready"))
        .env("PID", s.file("pid"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the child started", || s.file("ready").exists());
    let leader = job_pid(&s);
    if !killed {
        let supervisor = std::fs::read_to_string(s.file("out")).unwrap();
        let sent = Command::new("kill")
            .args(["-KILL", supervisor.trim()])
            .status()
            .unwrap();
        assert!(sent.success());
    }
    let mut conn = s.conn();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let running = alive(leader);
        let pttl: i64 = redis::cmd("PTTL").arg("wkey").query(&mut conn).unwrap();
        if pttl == -2 {
            // Alive before the key was seen gone: alive past the lease.
            assert!(!running, "the job outlived the key");
            break;
        }
        assert!(Instant::now() < end, "the key never expired");
    }
    // strace ends when its delay does.
    let _ = finish_within(run);
}
