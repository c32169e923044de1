//! The job never runs without the lock, whatever happens to the supervisor
//! (`redmutex run` itself): a broken stderr, a signal, renewals that stop
//! coming, a job that leaves processes behind, its own death by SIGKILL.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use redmutex_testkit::proxy::{Mode, Proxy};

/// A loss with stderr a closed pipe (`redmutex run ... 2>&1 | head -c0`):
/// the job is stopped all the same, and the command exits 70.
#[test]
fn a_broken_stderr_does_not_keep_the_job_running() {
    let s = setup("stderr");
    // The job's own stderr elsewhere: its shell would die of the broken
    // pipe (reporting its `sleep` terminated) before its trap ran.
    let job = "exec 2>/dev/null; trap 'echo term > \"$OUT\"; exit 0' TERM; ".to_owned() + RUNS;
    let mut cmd = s.cmd(&["run", "--ttl", "2s", "skey", "--", "sh", "-c", &job]);
    let mut run = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(run.stderr.take()); // the reading end closed: every write fails
    wait_for("the child started", || s.file("ready").exists());
    redis::cmd("DEL").arg("skey").exec(&mut s.conn()).unwrap();
    let status = finish_within(run);
    assert_eq!(status.code(), Some(70), "{status:?}");
    wait_for("the job stopped", || !alive(job_pid(&s)));
    assert_eq!(
        std::fs::read_to_string(s.file("out"))
            .unwrap_or_default()
            .trim(),
        "term",
        "the job was stopped"
    );
}

/// Every catchable signal that would end the supervisor reaches the job
/// (here: the job traps it and ends by itself), so that no signal leaves
/// the job running with nobody renewing the lease.
#[test]
fn every_terminating_signal_is_passed_to_the_job() {
    let s = setup("signals");
    for signal in ["QUIT", "USR1", "USR2", "ALRM", "VTALRM", "XCPU"] {
        let _ = std::fs::remove_file(s.file("ready"));
        let _ = std::fs::remove_file(s.file("out"));
        let job = format!("trap 'echo {signal} > \"$OUT\"; exit 0' {signal}; {RUNS}");
        let run = s
            .cmd(&["run", "sigkey", "--", "sh", "-c", &job])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the child started", || s.file("ready").exists());
        let sent = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &run.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = finish_within(run);
        assert_eq!(status.code(), Some(0), "SIG{signal}: {status:?}");
        assert_eq!(
            std::fs::read_to_string(s.file("out")).unwrap().trim(),
            signal
        );
    }
}

/// Renewals stop coming (the link to Redis blackholed) and the job ignores
/// SIGTERM: its SIGKILL must land before the key can expire on the server,
/// so that nobody else can be granted the lock while it runs. Checked from
/// the server's side: once the key is seen gone, the job must already be.
#[test]
fn the_kill_lands_before_the_key_can_expire() {
    let s = setup("deadline");
    let job = "trap '' TERM; ".to_owned() + RUNS;
    for round in 0..env_or("REDMUTEX_CLI_LOOPS", 5) {
        let _ = std::fs::remove_file(s.file("ready"));
        let proxy = Proxy::start(s.server.port());
        let run = s
            .cmd(&[
                "run",
                "--url",
                &proxy.url(),
                "--ttl",
                "1s",
                "--kill-grace",
                "400ms",
                "dkey",
                "--",
                "sh",
                "-c",
                &job,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the child started", || s.file("ready").exists());
        let pid = job_pid(&s);
        proxy.set(Mode::Blackhole);
        let mut conn = s.conn();
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            // The key first, then the job: a job alive after the key was
            // seen gone ran without the lock.
            let pttl: i64 = redis::cmd("PTTL").arg("dkey").query(&mut conn).unwrap();
            let running = alive(pid);
            if pttl == -2 {
                assert!(!running, "round {round}: the job outlived the key");
                break;
            }
            assert!(Instant::now() < end, "round {round}: the key never expired");
        }
        proxy.set(Mode::Pass);
        let status = finish_within(run);
        assert_eq!(status.code(), Some(70), "round {round}: {status:?}");
    }
}

/// The job's leader exits while a background process of its group runs on:
/// the lock is held until that one has exited too (as flock(1) holds it
/// while any process has the descriptor); with `--kill-stragglers`, it is
/// stopped instead.
#[test]
fn the_lock_is_held_until_the_whole_group_has_exited() {
    let s = setup("stragglers");
    let job = "(sleep 1; echo done > \"$OUT\") >/dev/null 2>&1 & exit 3";
    let out = s.run(&["run", "gkey", "--", "sh", "-c", job]);
    assert_eq!(code(&out), 3, "the leader's exit code: {out:?}");
    assert_eq!(
        std::fs::read_to_string(s.file("out"))
            .unwrap_or_default()
            .trim(),
        "done",
        "the lock was released while the background process ran"
    );
    let _ = std::fs::remove_file(s.file("out"));
    // The leader waits until the straggler has set its trap: a TERM
    // before that would end it without a word.
    let straggler = "(trap 'echo term > \"$OUT\"; exit 0' TERM; echo ready > \"$READY\"; \
                     while true; do sleep 0.05; done) >/dev/null 2>&1 & \
                     while [ ! -e \"$READY\" ]; do sleep 0.02; done; exit 0";
    let out = s.run(&[
        "run",
        "--kill-stragglers",
        "gkey",
        "--",
        "sh",
        "-c",
        straggler,
    ]);
    assert_eq!(code(&out), 0, "{out:?}");
    wait_for("the straggler stopped", || s.file("out").exists());
    assert_eq!(
        std::fs::read_to_string(s.file("out")).unwrap().trim(),
        "term"
    );
}

/// The supervisor killed with SIGKILL (nothing it can catch): the job, which
/// ignores SIGTERM and has a background process in its group, must be gone
/// before the key expires on the server.
#[test]
fn a_supervisor_killed_with_sigkill_leaves_no_job_past_the_lease() {
    let s = setup("sigkill");
    let (run, leader, background) = stubborn_job(&s, "3s", "kkey");
    let sent = std::process::Command::new("kill")
        .args(["-KILL", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    assert_eq!(finish_within(run).code(), None, "killed");
    gone_before_the_key_expires(&s, "kkey", [leader, background]);
}

/// The supervisor stopped with SIGSTOP (alive, renewing nothing): the
/// watcher kills the job before the key can expire on the server.
#[test]
fn a_supervisor_stopped_with_sigstop_leaves_no_job_past_the_lease() {
    let s = setup("sigstop");
    let (run, leader, background) = stubborn_job(&s, "3s", "kkey");
    let sent = std::process::Command::new("kill")
        .args(["-STOP", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    gone_before_the_key_expires(&s, "kkey", [leader, background]);
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &run.id().to_string()])
        .status();
    let status = finish_within(run);
    assert_eq!(status.code(), Some(70), "{status:?}");
}

/// The watcher reads the deadlines the supervisor sends it late (a loaded
/// machine's scheduler left it waiting; here it is stopped for 1.5 s), and
/// the supervisor stops renewing meanwhile (SIGSTOP): a deadline counts
/// from when it was sent, not from when it was read, so the job is still
/// killed before the key can expire. (It was killed 1.5 s late, past the
/// key, when the watcher counted from its reading.)
#[test]
fn a_watcher_that_reads_its_deadline_late_still_kills_the_job_before_the_key_expires() {
    let s = setup("late-watcher");
    // A TTL of 6 s: renewals every 2 s, a kill margin of 600 ms and a kill
    // grace of 2 s; while the supervisor runs, its lease ends more than
    // 2.6 s ahead, so a watcher back 1.5 s after the supervisor stopped
    // still has 500 ms before its kill margin.
    let (run, leader, background) = stubborn_job(&s, "6s", "lkey");
    let mut watchers = Vec::new();
    wait_for("the watcher found", || {
        watchers = watchers_of(run.id());
        watchers.len() == 1
    });
    let watcher = watchers[0];
    signal(watcher, "STOP");
    // A renewal's deadline is sent while the watcher cannot read it: it
    // waits in the pipe.
    let pipe = unread_in_pipe(watcher);
    wait_for("a deadline sent to the stopped watcher", || pipe() > 0);
    signal(run.id(), "STOP");
    // The watcher comes back late (a controlled stall, not a wait for an
    // event), and reads the deadline the supervisor sent before it stopped.
    #[allow(clippy::disallowed_methods)] // the stall is what is tested
    std::thread::sleep(Duration::from_millis(1500));
    signal(watcher, "CONT");
    gone_before_the_key_expires(&s, "lkey", [leader, background]);
    signal(run.id(), "CONT");
    let status = finish_within(run);
    assert_eq!(status.code(), Some(70), "{status:?}");
}

/// Starts `redmutex run --ttl <ttl> <key>` on a job that ignores SIGTERM
/// and leaves a background process in its group: the run, the job's
/// leader and that background process, once the job has started.
fn stubborn_job(s: &Setup, ttl: &str, key: &str) -> (std::process::Child, u32, u32) {
    let job = "trap '' TERM; sleep 1000 & echo $! > \"$OUT\"; ".to_owned() + RUNS;
    let run = s
        .cmd(&["run", "--ttl", ttl, key, "--", "sh", "-c", &job])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the child started", || s.file("ready").exists());
    let leader = job_pid(s);
    let background: u32 = std::fs::read_to_string(s.file("out"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (run, leader, background)
}

/// Waits (20 s at most) for `key` to expire on the server, and asserts
/// that none of `pids` is alive once it has: read after the key was seen
/// gone, a process alive then outlived the lease.
fn gone_before_the_key_expires(s: &Setup, key: &str, pids: [u32; 2]) {
    let mut conn = s.conn();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut conn).unwrap();
        let running = pids.map(alive);
        if pttl == -2 {
            assert_eq!(running, [false, false], "the job outlived the key");
            break;
        }
        assert!(Instant::now() < end, "the key never expired");
    }
}

/// Sends `kill -<name>` to `pid`.
fn signal(pid: u32, name: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{name} {pid}");
}

/// How many bytes wait unread in the pipe that is `pid`'s stdin, as a
/// function to call again.
fn unread_in_pipe(pid: u32) -> impl Fn() -> i32 {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // Opened through /proc: the same pipe, read by nobody here (FIONREAD
    // only counts).
    let pipe = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/{pid}/fd/0"))
        .unwrap();
    move || {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD on an open descriptor writes one int to `n`.
        let r = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut n) };
        assert_eq!(r, 0, "FIONREAD: {}", std::io::Error::last_os_error());
        n
    }
}

/// The watchers (`redmutex __watch`) whose parent is `run`, alive.
fn watchers_of(run: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
        let ppid = after.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(run) && cmdline.windows(7).any(|w| w == b"__watch") && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// The watcher killed alone (an operator's `kill -9`, the OOM killer): the
/// supervisor must not go on without one, or its own SIGKILL later leaves
/// the job running past the lease. Either a new watcher takes over, or the
/// job is stopped; then the supervisor's SIGKILL leaves no job past the key.
#[test]
fn a_watcher_killed_alone_does_not_leave_the_job_unwatched() {
    let s = setup("watcher-killed");
    let (run, leader, background) = stubborn_job(&s, "3s", "wkey");
    let first = watchers_of(run.id());
    assert_eq!(first.len(), 1, "one watcher: {first:?}");
    let sent = std::process::Command::new("kill")
        .args(["-KILL", &first[0].to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    wait_for("a new watcher, or the job stopped", || {
        !alive(leader) || watchers_of(run.id()).iter().any(|w| *w != first[0])
    });
    let sent = std::process::Command::new("kill")
        .args(["-KILL", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    assert_eq!(finish_within(run).code(), None, "killed");
    let mut conn = s.conn();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let running = [leader, background].map(alive);
        let pttl: i64 = redis::cmd("PTTL").arg("wkey").query(&mut conn).unwrap();
        if pttl == -2 {
            // Alive before the key was seen gone: alive past the lease.
            assert_eq!(running, [false, false], "the job outlived the key");
            break;
        }
        assert!(Instant::now() < end, "the key never expired");
    }
}

/// The watcher killed alone during a kill grace (here `--kill-stragglers`
/// stopping a straggler that ignores SIGTERM, the lease still renewed): it
/// must be replaced then too, or the supervisor's own SIGKILL during the
/// grace leaves the straggler running past the lease.
#[test]
fn a_watcher_killed_during_the_kill_grace_is_replaced() {
    let s = setup("watcher-grace");
    // The straggler records the SIGTERM (the grace has begun) and runs on.
    let job = "sh -c 'trap \"echo term > $OUT\" TERM; echo $$ > \"$PID\"; \
               echo ready > \"$READY\"; while true; do sleep 0.05; done' \
               >/dev/null 2>&1 & \
               while [ ! -e \"$READY\" ]; do sleep 0.02; done; exit 0";
    let run = s
        .cmd(&[
            "run",
            "--ttl",
            "9s",
            "--kill-grace",
            "3s",
            "--kill-stragglers",
            "gwkey",
            "--",
            "sh",
            "-c",
            job,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the grace began", || s.file("out").exists());
    let straggler: u32 = std::fs::read_to_string(s.file("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let first = watchers_of(run.id());
    assert_eq!(first.len(), 1, "one watcher: {first:?}");
    let sent = std::process::Command::new("kill")
        .args(["-KILL", &first[0].to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    // Well within the 3 s grace (a replacement takes about 10 ms).
    let end = Instant::now() + Duration::from_millis(2000);
    // A channel that never receives makes the pause between two looks.
    let (_keep, pause) = std::sync::mpsc::channel::<()>();
    let replaced = loop {
        if watchers_of(run.id()).iter().any(|w| *w != first[0]) {
            break true;
        }
        if Instant::now() >= end {
            break false;
        }
        let _ = pause.recv_timeout(Duration::from_millis(10));
    };
    let sent = std::process::Command::new("kill")
        .args(["-KILL", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    assert_eq!(finish_within(run).code(), None, "killed");
    let mut conn = s.conn();
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let running = alive(straggler);
        let pttl: i64 = redis::cmd("PTTL").arg("gwkey").query(&mut conn).unwrap();
        if pttl == -2 {
            if running {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &straggler.to_string()])
                    .status();
            }
            assert!(
                !running,
                "the straggler outlived the key (watcher replaced: {replaced})"
            );
            break;
        }
        assert!(Instant::now() < end, "the key never expired");
    }
    assert!(replaced, "the watcher was not replaced during the grace");
}

/// The supervisor stopped (SIGSTOP) past the watcher's kill point but
/// resumed before the key expires: the watcher has killed the job with the
/// lease still valid, and the run must say so with 70, not pass on the
/// job's 137 as if the job had died by itself.
#[test]
fn a_job_killed_by_the_watcher_exits_70() {
    let s = setup("watcher-kill");
    // A 10 s TTL: the watcher kills a kill margin (1 s) before the lease's
    // local deadline, which leaves about 0.9 s to resume the supervisor
    // before the key expires.
    let run = s.start(&["run", "--ttl", "10s", "wk70", "--", "sh", "-c", RUNS]);
    let leader = job_pid(&s);
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(stop.success());
    let end = Instant::now() + Duration::from_secs(30);
    let (_keep, pause) = std::sync::mpsc::channel::<()>();
    while alive(leader) {
        assert!(Instant::now() < end, "the watcher never killed the job");
        let _ = pause.recv_timeout(Duration::from_millis(5));
    }
    let cont = std::process::Command::new("kill")
        .args(["-CONT", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(cont.success());
    let pttl: i64 = redis::cmd("PTTL").arg("wk70").query(&mut s.conn()).unwrap();
    let out = finish(run);
    assert!(
        pttl > 0,
        "precondition: resumed before the key expired ({pttl})"
    );
    assert_eq!(code(&out), 70, "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("watcher"), "{stderr}");
}
