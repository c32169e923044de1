//! `-v` with stderr a pipe nobody reads: the library's log lines, some
//! written from the watchdog thread, must never hold up the renewals.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::os::unix::io::AsRawFd;
use std::time::{Duration, Instant};

use common::*;

/// Bytes written so far by process `pid` (`wchar` of /proc/PID/io).
fn written(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("wchar: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_full_stderr_does_not_hold_up_renewals() {
    let s = setup("verbose");
    // A background process of the job fills the shared stderr pipe (and
    // then blocks); the job runs on.
    let job = "head -c 1000000 /dev/zero >&2 & echo $! > \"$OUT\"; ".to_owned() + RUNS;
    let run = s.start(&[
        "run",
        "-v",
        "--ttl",
        "6s",
        "--kill-grace",
        "200ms",
        "vkey",
        "--",
        "sh",
        "-c",
        &job,
    ]);
    // SAFETY: fcntl on a pipe descriptor this test owns.
    let size = unsafe { libc::fcntl(run.stderr.as_ref().unwrap().as_raw_fd(), libc::F_GETPIPE_SZ) };
    assert!(size > 0);
    let filler: u32 = std::fs::read_to_string(s.file("out"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_for("stderr is full", || {
        written(filler) >= u64::try_from(size).unwrap()
    });
    let leader = job_pid(&s);
    let mut conn = s.conn();
    // Renewals fail for a while (scripts denied to the user by an ACL),
    // long enough for one to fail (the watchdog logs it, a
    // warning, before it retries), then pass again.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("-@scripting")
        .query(&mut conn)
        .unwrap();
    wait_for("a renewal was due and failed", || {
        redis::cmd("PTTL")
            .arg("vkey")
            .query::<i64>(&mut s.conn())
            .unwrap()
            < 3500
    });
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("+@all")
        .query(&mut conn)
        .unwrap();
    // Renewals go on (each one raises PTTL): two seen within 8 s.
    let end = Instant::now() + Duration::from_secs(8);
    let mut last: i64 = redis::cmd("PTTL").arg("vkey").query(&mut conn).unwrap();
    let mut renewals = 0;
    while renewals < 2 {
        assert!(
            Instant::now() < end,
            "renewals stopped after the error ({renewals} seen)"
        );
        let pttl: i64 = redis::cmd("PTTL").arg("vkey").query(&mut conn).unwrap();
        assert!(
            pttl > 0,
            "the key is gone: renewals stopped after the error, the job was stopped"
        );
        if pttl > last + 100 {
            renewals += 1;
        }
        last = pttl;
        let (_keep, pause) = std::sync::mpsc::channel::<()>();
        let _ = pause.recv_timeout(Duration::from_millis(20));
    }
    assert!(alive(leader), "the job runs on");
    // Cleanup: the job's group, then the run.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{leader}")])
        .status();
    drop(run);
}
