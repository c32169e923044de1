//! The lock-delay scenario: worker processes take one lock (TTL 1 s,
//! renewed by the watchdog) and, while they hold it, append writes to a
//! list in a resource Redis that checks **no** fencing token; each write
//! comes after a check that the lease is not lost and a moment of work, so
//! a holder paused (`SIGSTOP`) past its lease writes once more when it
//! resumes. The coordinator pauses the holder for `PAUSE`, longer than
//! the TTL, a few times.
//!
//! Rule `late-write`: the writes in the list, in the order the resource
//! took them, carry fencing tokens that never go down: no write of an
//! older holder lands after one of a newer holder. With a lock-delay of
//! at least the pause (plus a margin for the resumed process to be
//! scheduled), the next holder starts only after the paused one's late
//! writes. The negative control runs the same with no lock-delay, and must
//! trip the rule: the next holder starts at the lease's expiry, during the
//! pause.
//!
//! `REDMUTEX_CHAOS_ONLY=lock-delay cargo test --test chaos` runs the
//! scenario and its control alone.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redis::Commands;
use redmutex::{Backoff, Locker};

use crate::common::{self, Server};

/// The environment variable that makes this binary a lock-delay worker:
/// `<lock url>|<resource url>|<lock-delay ms>`.
pub const ENV: &str = "REDMUTEX_CHAOS_DELAY_WORKER";
/// The rule this scenario checks.
pub const RULE: &str = "late-write";
const KEY: &str = "delayed";
const LIST: &str = "writes";
const TTL: Duration = Duration::from_millis(1000);
/// How long a holder is paused: past its lease.
const PAUSE: Duration = Duration::from_millis(2000);
/// The scenario's lock-delay: the pause, and a second for the resumed
/// process's late write to land on a loaded machine.
const DELAY: Duration = Duration::from_millis(3000);
const WORKERS: usize = 3;
const PAUSES: usize = 3;

/// A worker process: lock, a few checked-then-written writes, unlock, for
/// ever (the coordinator kills it).
pub fn worker(spec: &str) {
    let parts: Vec<&str> = spec.split('|').collect();
    let (lock_url, resource_url) = (parts[0], parts[1]);
    let delay = Duration::from_millis(parts[2].parse().expect("a delay in ms"));
    let pid = std::process::id();
    let locker = Locker::builder(redmutex::pool(lock_url).expect("a pool"))
        .ttl(TTL)
        .lock_delay(delay)
        .metadata(pid.to_string())
        .backoff(Backoff::exponential(
            Duration::from_millis(1),
            Duration::from_millis(50),
        ))
        .build()
        .expect("a locker");
    let mut resource = redis::Client::open(resource_url)
        .and_then(|c| c.get_connection())
        .expect("the resource");
    loop {
        let Ok(guard) = locker.lock_timeout(KEY, Duration::from_secs(60)) else {
            continue;
        };
        let token = guard.fencing_token();
        for i in 0..10 {
            if guard.is_lost() {
                break;
            }
            // Work between the check and the write: a pause here makes
            // the write late. The resource checks no token.
            std::thread::sleep(Duration::from_millis(20));
            let _: Result<(), _> = resource.rpush(LIST, format!("{pid}:{token}:{i}"));
        }
        let _ = guard.unlock();
    }
}

/// What one run saw.
pub struct Outcome {
    pub writes: usize,
    /// Pauses that hit the holder of the lock.
    pub landed: usize,
    pub violations: Vec<String>,
}

/// Runs the workers with lock-delay `delay`, pauses the holder `PAUSES`
/// times, and checks the rule over the resource's list.
pub fn run(delay: Duration) -> Outcome {
    let lock = Server::start();
    let resource = Server::start();
    let spec = format!("{}|{}|{}", lock.url(), resource.url(), delay.as_millis());
    let mut workers: Vec<Child> = (0..WORKERS)
        .map(|_| {
            Command::new(std::env::current_exe().expect("this binary"))
                .env(ENV, &spec)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start a worker process")
        })
        .collect();
    let observer = Locker::open(&lock.url()).expect("a locker");
    common::wait_until("the first writes", Duration::from_secs(30), || {
        resource.conn().llen::<_, usize>(LIST).unwrap_or(0) >= 10
    });
    let holder = || -> Option<i32> {
        observer
            .holder(KEY)
            .ok()
            .flatten()
            .and_then(|info| info.metadata().parse().ok())
    };
    let mut landed = 0;
    for _ in 0..PAUSES {
        let started = Instant::now();
        let pid = loop {
            if let Some(pid) = holder() {
                break pid;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "no holder");
            std::thread::sleep(Duration::from_millis(5));
        };
        let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        if holder() == Some(pid) {
            landed += 1;
        }
        std::thread::sleep(PAUSE);
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        // The lease's end, the delay, and the next holder's writes.
        std::thread::sleep(TTL + delay + Duration::from_millis(1000));
    }
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    let writes: Vec<String> = resource.conn().lrange(LIST, 0, -1).unwrap_or_default();
    Outcome {
        writes: writes.len(),
        landed,
        violations: check(&writes),
    }
}

/// The rule over the writes `<pid>:<token>:<i>` in the resource's order:
/// a write whose token is below one that landed before it is a late write
/// of an older holder, interleaved with a newer holder's.
pub fn check(writes: &[String]) -> Vec<String> {
    let mut newest: Option<(u64, &str)> = None;
    let mut violations = Vec::new();
    for (at, w) in writes.iter().enumerate() {
        let token: u64 = w
            .split(':')
            .nth(1)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        match newest {
            Some((n, by)) if token < n => violations.push(format!(
                "[{RULE}] write {at} ({w}) of token {token} landed after a write of the newer \
                 token {n} ({by})"
            )),
            Some((n, _)) if token == n => {}
            _ => newest = Some((token, w)),
        }
    }
    violations
}

/// The scenario and its negative control; prints their lines like the
/// other scenarios' and says whether either failed.
pub fn scenario_and_control(only: Option<&str>) -> bool {
    let mut failed = false;
    let name = format!(
        "lock-delay {:?} >= pause {:?}, unfenced resource",
        DELAY, PAUSE
    );
    if only.is_none_or(|o| name.contains(o)) {
        let out = run(DELAY);
        println!(
            "{name:<52} {} writes, {} of {PAUSES} pauses on a holder, {} [{RULE}] violations",
            out.writes,
            out.landed,
            out.violations.len()
        );
        for v in out.violations.iter().take(10) {
            println!("    VIOLATION: {v}");
        }
        if out.landed == 0 {
            println!("    FAILED: no pause hit a holder: the scenario showed nothing");
        }
        failed |= !out.violations.is_empty() || out.landed == 0;
    }
    let name = "negative control: no-lock-delay";
    if only.is_none_or(|o| name.contains(o) || o.contains("control")) {
        let out = run(Duration::ZERO);
        let tripped = out.violations.len();
        println!(
            "{name:<52} {tripped} [{RULE}] violations in {} writes, {} of {PAUSES} pauses on a \
             holder (expected: some [{RULE}])",
            out.writes, out.landed
        );
        if let Some(v) = out.violations.first() {
            println!("    e.g. {v}");
        }
        if tripped == 0 {
            println!("    FAILED: the [{RULE}] rule saw nothing wrong without a lock-delay");
            failed = true;
        }
    }
    failed
}

/// The rule, on made-up histories.
pub fn checker_finds_late_writes() {
    let w = |s: &str| s.to_owned();
    assert!(check(&[w("1:5:0"), w("1:5:1"), w("2:7:0"), w("2:7:1")]).is_empty());
    let late = check(&[w("1:5:0"), w("2:7:0"), w("1:5:1"), w("2:7:1")]);
    assert_eq!(late.len(), 1, "{late:?}");
}
