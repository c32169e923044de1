//! A process of the job's group that a SIGKILL does not end at once (in
//! uninterruptible sleep, or slow to exit) must not see the lock released
//! while it lives. Made deterministic with the cgroup v1 freezer: a frozen
//! process takes a SIGKILL only when thawed. Skipped (with a message) where
//! that freezer cannot be used (not Linux, not root, cgroup v2 only).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::process::Stdio;

use common::*;

/// A cgroup v1 freezer group of its own, thawed and removed on drop.
struct Freezer {
    dir: PathBuf,
}

impl Freezer {
    /// `None` (the test is skipped) when no cgroup v1 freezer can be made.
    fn new(name: &str) -> Option<Freezer> {
        let dir = PathBuf::from("/sys/fs/cgroup/freezer")
            .join(format!("redmutex-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        Some(Freezer { dir })
    }

    /// Moves `pid` into the group and freezes it; false when that failed.
    fn freeze(&self, pid: u32) -> bool {
        std::fs::write(self.dir.join("tasks"), pid.to_string()).is_ok()
            && std::fs::write(self.dir.join("freezer.state"), "FROZEN").is_ok()
    }

    fn thaw(&self) {
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.thaw();
        // Empty once the thawed processes have taken their SIGKILL; a
        // channel that never receives makes the pause between two tries.
        let (_keep, pause) = std::sync::mpsc::channel::<()>();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::remove_dir(&self.dir).is_err() && std::time::Instant::now() < end {
            let _ = pause.recv_timeout(std::time::Duration::from_millis(20));
        }
    }
}

/// `--kill-stragglers`: the leader exits, a background process of its
/// group is frozen (so SIGTERM and SIGKILL reach it only when thawed).
/// The supervisor must not delete the key while that process lives: it
/// waits (bounded) for the group to empty, then leaves the lock to expire
/// and exits 70.
#[test]
fn a_straggler_that_outlives_its_sigkill_keeps_the_lock() {
    let s = setup("frozen");
    let Some(freezer) = Freezer::new("straggler") else {
        eprintln!("skipped: no cgroup v1 freezer here");
        return;
    };
    let job = "sleep 1000 & echo $! > \"$OUT\"; \
               while [ ! -e \"$READY\" ]; do sleep 0.02; done; exit 0";
    let run = s
        .cmd(&[
            "run",
            "--ttl",
            "3s",
            "--kill-grace",
            "300ms",
            "--kill-stragglers",
            "fkey",
            "--",
            "sh",
            "-c",
            job,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the background process started", || {
        std::fs::read_to_string(s.file("out")).is_ok_and(|t| t.ends_with('\n'))
    });
    let straggler: u32 = std::fs::read_to_string(s.file("out"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if !freezer.freeze(straggler) {
        eprintln!("skipped: cannot freeze a process here");
        std::fs::write(s.file("ready"), "go").unwrap();
        let _ = finish_within(run);
        return;
    }
    std::fs::write(s.file("ready"), "go").unwrap();
    let status = finish_within(run);
    // The straggler first, then the key: alive after the supervisor ended
    // and the key gone means it ran without the lock.
    assert!(
        alive(straggler),
        "the frozen process is alive (precondition)"
    );
    let pttl: i64 = redis::cmd("PTTL").arg("fkey").query(&mut s.conn()).unwrap();
    assert!(
        pttl > 0,
        "the lock was released while a process of the group lived (PTTL {pttl})"
    );
    assert_eq!(status.code(), Some(70), "{status:?}");
    freezer.thaw();
    wait_for("the straggler took its SIGKILL", || !alive(straggler));
}

/// The watcher killed the job while the supervisor was stopped (SIGSTOP),
/// and a process of the job's group outlives that SIGKILL (frozen): once
/// resumed, the supervisor finds the group not yet empty and the lease
/// about to end, and must still say that the watcher killed the command
/// (exit 70), not that it stopped it itself for a lease it failed to renew.
/// (Without the freezer the same happens now and then on a loaded machine,
/// when the job's last process takes a moment to die.)
#[test]
fn a_watcher_kill_is_said_when_a_process_outlives_it() {
    let s = setup("frozen-watcher");
    let Some(freezer) = Freezer::new("watcher") else {
        eprintln!("skipped: no cgroup v1 freezer here");
        return;
    };
    let job = "sleep 1000 & echo $! > \"$OUT\"; echo $$ > \"$PID\"; \
               echo started > \"$READY\"; while true; do sleep 0.05; done";
    let run = s
        .cmd(&["run", "--ttl", "3s", "fwkey", "--", "sh", "-c", job])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the job started", || s.file("ready").exists());
    let straggler: u32 = std::fs::read_to_string(s.file("out"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let leader = job_pid(&s);
    if !freezer.freeze(straggler) {
        eprintln!("skipped: cannot freeze a process here");
        nix_term(&run);
        let _ = finish(run);
        return;
    }
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .args([name, &run.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    wait_for("the watcher killed the job's leader", || !alive(leader));
    // The lease ends meanwhile, so that the supervisor, resumed, finds it
    // lost (its renewal cannot win a race to keep it).
    let mut conn = s.conn();
    wait_for("the key expired", || {
        redis::cmd("EXISTS")
            .arg("fwkey")
            .query::<i64>(&mut conn)
            .unwrap()
            == 0
    });
    signal("-CONT");
    let mut run = run;
    wait_for("redmutex ended", || run.try_wait().unwrap().is_some());
    // Thawed first: the straggler holds the stderr pipe open.
    freezer.thaw();
    wait_for("the straggler took its SIGKILL", || !alive(straggler));
    let out = finish(run);
    assert_eq!(code(&out), 70, "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the watcher process killed the command"),
        "{stderr}"
    );
}
