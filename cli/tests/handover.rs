//! A run that waits for the lock is handed it by the holder's release, and
//! runs its job to the end: a hand-over must not look like a lease about
//! to run out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use redis::Commands;

/// `REDMUTEX_CLI_LOOPS` rounds (20 by default) of: a first run holds the
/// lock; a second run queues behind it; the first job ends (after
/// `REDMUTEX_CLI_HOLD_MS`, 0 by default) and hands the lock over; the
/// second job must run to its end, not be stopped. For the measured loop:
/// `REDMUTEX_CLI_LOOPS=50 REDMUTEX_CLI_HOLD_MS=2000 cargo test -p
/// redmutex-cli --test handover -- --nocapture`.
#[test]
fn a_run_that_waits_is_handed_the_lock_and_runs_its_job() {
    let s = setup("handover");
    let loops: u32 = env_or("REDMUTEX_CLI_LOOPS", 20);
    let hold_ms: u64 = env_or("REDMUTEX_CLI_HOLD_MS", 0);
    let hold = format!("{}.{:03}", hold_ms / 1000, hold_ms % 1000);
    let holder_job = format!(
        "echo started > \"$READY\"; while [ ! -e \"$GO\" ]; do sleep 0.02; done; sleep {hold}"
    );
    let waiter_job = "sleep 0.3; echo ran >> \"$OUT\"";
    let queue = "__redmutex__:queue:hkey";
    let mut stopped = 0;
    for round in 0..loops {
        let _ = std::fs::remove_file(s.file("ready"));
        let _ = std::fs::remove_file(s.file("go"));
        let _ = std::fs::remove_file(s.file("out"));
        let first = s.start_with(
            &["run", "hkey", "--", "sh", "-c", &holder_job],
            &[("GO", s.file("go"))],
        );
        let second = s
            .cmd(&["run", "-w", "60s", "hkey", "--", "sh", "-c", waiter_job])
            .spawn()
            .unwrap();
        wait_for("the second run queued", || {
            s.conn().zcard::<_, u64>(queue).unwrap() == 1
        });
        std::fs::write(s.file("go"), "go").unwrap();
        let first = finish(first);
        assert_eq!(code(&first), 0, "round {round}: {first:?}");
        let second = finish(second);
        let ran = std::fs::read_to_string(s.file("out")).unwrap_or_default();
        if code(&second) != 0 || ran.trim() != "ran" {
            stopped += 1;
            eprintln!("round {round}: the waiting run's job was stopped: {second:?}");
        }
    }
    eprintln!("{loops} rounds with a {hold_ms} ms hold: {stopped} jobs stopped");
    assert_eq!(stopped, 0, "of {loops} rounds");
}

/// A run that waits while its binary is upgraded (the file replaced or
/// removed, as a package manager does) is still handed the lock and runs
/// its job: its watcher is this same program, and must be started from
/// the running image, not from a path that now names another file or
/// none.
#[test]
fn a_run_whose_binary_was_replaced_while_waiting_still_runs_its_job() {
    let s = setup("handover-upgrade");
    let copy = s.file("redmutex-copy");
    std::fs::copy(env!("CARGO_BIN_EXE_redmutex"), &copy).unwrap();
    let holder_job = "echo started > \"$READY\"; while [ ! -e \"$GO\" ]; do sleep 0.02; done";
    let first = s.start_with(
        &["run", "ukey", "--", "sh", "-c", holder_job],
        &[("GO", s.file("go"))],
    );
    let second = std::process::Command::new(&copy)
        .args(["run", "-w", "60s", "ukey", "--", "sh", "-c"])
        .arg("echo ran > \"$OUT\"")
        .env("REDIS_URL", s.server.url())
        .env("OUT", s.file("out"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the second run queued", || {
        s.conn().zcard::<_, u64>("__redmutex__:queue:ukey").unwrap() == 1
    });
    std::fs::remove_file(&copy).unwrap();
    std::fs::write(s.file("go"), "go").unwrap();
    assert_eq!(code(&finish(first)), 0);
    let second = finish(second);
    assert_eq!(code(&second), 0, "{second:?}");
    assert_eq!(
        std::fs::read_to_string(s.file("out"))
            .unwrap_or_default()
            .trim(),
        "ran"
    );
}

/// A run handed the lock by a release starts its job only once its lease
/// is taken up to the full TTL: the job reads the key's PTTL from Redis as
/// it starts and finds the TTL, not the hand-over's claim of a few
/// seconds. Every trip of the waiting run takes 100 ms each way (a proxy),
/// so a job started before the take-up came back would see the claim. A
/// round where the waiting run took the lock by its own attempt rather
/// than the hand-over (said at `-v`) is tried again.
#[test]
fn a_run_handed_the_lock_starts_its_job_with_a_full_lease() {
    let s = setup("handover-full-lease");
    let proxy = redmutex_testkit::proxy::Proxy::with_delay(
        s.server.port(),
        std::time::Duration::from_millis(100),
    );
    let holder_job = "echo started > \"$READY\"; while [ ! -e \"$GO\" ]; do sleep 0.02; done";
    let waiter_job = format!("redis-cli -p {} PTTL fkey > \"$OUT\"", s.server.port());
    for round in 0..5 {
        let _ = std::fs::remove_file(s.file("ready"));
        let _ = std::fs::remove_file(s.file("go"));
        let _ = std::fs::remove_file(s.file("out"));
        let first = s.start_with(
            &["run", "fkey", "--", "sh", "-c", holder_job],
            &[("GO", s.file("go"))],
        );
        let second = s
            .cmd(&[
                "run",
                "-v",
                "-w",
                "60s",
                "fkey",
                "--",
                "sh",
                "-c",
                &waiter_job,
            ])
            .env("REDIS_URL", proxy.url())
            .spawn()
            .unwrap();
        // Queued, listening for releases, and a few attempts in, where its
        // backoff pauses 128 to 256 ms between attempts: the release then
        // comes between two attempts more often than while one is on its
        // way (which would find the lock its own, not handed over).
        let attempts = std::cell::RefCell::new(Vec::<String>::new());
        wait_for("the second run's sixth attempt, listening", || {
            let mut c = s.conn();
            let entry: Vec<String> = redis::cmd("HVALS")
                .arg("__redmutex__:waiters:fkey")
                .query(&mut c)
                .unwrap();
            let mut seen = attempts.borrow_mut();
            if let Some(e) = entry.first().filter(|e| seen.last() != Some(*e)) {
                seen.push(e.clone());
            }
            let listening: Vec<(String, u64)> = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("__redmutex__:released")
                .query(&mut c)
                .unwrap();
            seen.len() >= 6 && listening.first().is_some_and(|(_, n)| *n == 1)
        });
        std::fs::write(s.file("go"), "go").unwrap();
        assert_eq!(code(&finish(first)), 0);
        let second = finish(second);
        assert_eq!(code(&second), 0, "{second:?}");
        if !String::from_utf8_lossy(&second.stderr).contains("handed over") {
            eprintln!("round {round}: taken by the run's own attempt, not handed over");
            continue;
        }
        let pttl: i64 = std::fs::read_to_string(s.file("out"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            pttl > 10_000,
            "the job started with {pttl} ms left on the key: before the take-up"
        );
        return;
    }
    panic!("no round of five was handed over");
}
