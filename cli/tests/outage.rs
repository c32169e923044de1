//! Redis stops under a running job: the job is stopped, and `redmutex`
//! exits soon after, its `-v` log saying each thing once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;

/// A job that says when it got SIGTERM (writes `$OUT`) and exits then.
const STOPS_ON_TERM: &str = "trap 'echo term > \"$OUT\"; exit 0' TERM; \
                             echo $$ > \"$PID\"; echo started > \"$READY\"; \
                             while true; do sleep 0.05; done";

/// Polls (bounded, 30 s) until `run` has exited; returns when the job
/// was told to stop (it wrote `$OUT`) and when `run` had exited, as seen
/// by polls 5 ms apart.
fn stop_and_exit_times(s: &Setup, run: &mut Child) -> (Instant, Instant) {
    let end = Instant::now() + Duration::from_secs(30);
    let (_keep, pause) = std::sync::mpsc::channel::<()>();
    let mut term = None;
    loop {
        if term.is_none() && s.file("out").exists() {
            term = Some(Instant::now());
        }
        if run.try_wait().unwrap().is_some() {
            let exited = Instant::now();
            return (term.unwrap_or(exited), exited);
        }
        assert!(Instant::now() < end, "redmutex did not exit within 30 s");
        let _ = pause.recv_timeout(Duration::from_millis(5));
    }
}

/// A run (with `extra` options) of a job that stops on SIGTERM, and Redis
/// killed under it: the run's output (exit 70 checked), when the job was
/// told to stop and when the run had exited.
fn outage(name: &str, extra: &[&str]) -> (Setup, std::process::Output, Instant, Instant) {
    let mut s = setup(name);
    let mut args = vec!["run", "--ttl", "3s"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["okey", "--", "sh", "-c", STOPS_ON_TERM]);
    let mut run = s.start(&args);
    s.server.kill();
    let (term, exited) = stop_and_exit_times(&s, &mut run);
    let out = finish(run);
    assert_eq!(code(&out), 70, "{out:?}");
    (s, out, term, exited)
}

/// Redis is killed under a running job: once the lease can no longer be
/// promised the job gets SIGTERM, and `redmutex` exits within a second or
/// so of that, not after waiting out the release's checkout timeout (2 s)
/// on a server that is gone: it took 3.3 s. The bound, 2 s, is generous
/// (the release after a stop waits 0.5 s at most); it fails the old
/// behaviour, which never took less than the checkout timeout.
#[test]
fn redmutex_exits_soon_after_stopping_its_job_when_redis_stops() {
    let (s, out, term, exited) = outage("outage-exit", &[]);
    assert!(
        s.file("out").exists(),
        "the job was not told to stop: {out:?}"
    );
    let after = exited.saturating_duration_since(term);
    assert!(
        after < Duration::from_secs(2),
        "redmutex exited {after:?} after stopping its job: {out:?}"
    );
}

/// `-v` through the same outage: each distinct line is written once, and
/// a line that came again says how many times (r2d2 logs every failed
/// connection attempt: 18 identical "Connection refused" lines before).
#[test]
fn verbose_says_each_line_once_with_repeats_counted() {
    let (_s, out, _, _) = outage("outage-verbose", &["-v"]);
    let said = String::from_utf8_lossy(&out.stderr);
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for line in said.lines() {
        *seen.entry(line).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "lines said more than once: {twice:?}\n{said}"
    );
    assert!(
        said.lines()
            .any(|l| l.contains("Connection refused") && l.contains("times")),
        "no repeat count for the refused connections:\n{said}"
    );
}
