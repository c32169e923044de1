//! The fault suite: worker processes contend for locks while faults are
//! injected, and a checker reads the recorded history; the histories of
//! the objects written under the lock are checked for linearizability too
//! (see `linear.rs`).
//!
//! `cargo test --test chaos` runs the short profile (every fault in its own
//! scenario, a Redlock scenario, and a negative control per rule);
//! `REDMUTEX_CHAOS=long cargo test --release --test chaos` adds long soaks
//! that mix every fault, and prints the figures that `RELIABILITY.md` lists.
//! `REDMUTEX_CHAOS_REPORT=<file>` also writes them to a file.
//!
//! Under each violation, the output and the report print the faults
//! injected within three TTLs of it and the records of the sections it
//! names (and of their neighbours), every time against the violation's
//! moment; a real locker's run with violations also keeps its history
//! (every worker's records, `events.txt`, `violations.txt`) under
//! `REDMUTEX_CHAOS_KEEP`, else `<REDMUTEX_CHAOS_REPORT>.history`, else the
//! temporary directory, and says where.
//!
//! This binary is its own worker: with `REDMUTEX_CHAOS_WORKER` set it runs
//! one worker process (see `worker.rs`) instead.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::disallowed_methods,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

mod broken;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod controls;
mod delay;
mod election;
mod history;
mod linear;
mod report;
mod run;
mod scenarios;
mod selfcheck;
mod support;
mod worker;

use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::path::PathBuf;

use broken::Flaw;
use history::{ms, summary, Event, Kind, Verdict};
use report::Totals;
use run::run;
use support::{limits, nanos};

const TTL: Duration = Duration::from_millis(1000);
const IO: Duration = Duration::from_millis(200);
/// Redlock caps each call at a tenth of the TTL.
const REDLOCK_IO: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_millis(100);
const WORKERS: u32 = 3;
/// Scheduling allowance of the time bounds, for a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(400);
/// Time given to the system after each fault, before the next one.
const GAP: Duration = Duration::from_millis(2500);
/// The Redis ACL user without channel rights that every third worker of a
/// single-server scenario uses.
const NO_CHANNELS: &str = "nochannels";

#[derive(Debug, Clone)]
struct Scenario {
    name: String,
    redlock: bool,
    /// Sentinel (a master, a replica, three sentinels), with this many
    /// replicas to acknowledge each grant.
    sentinel: Option<u64>,
    flaw: Option<Flaw>,
    faults: Vec<Kind>,
    /// Mix the faults at random for this long instead of once each.
    soak: Option<Duration>,
    /// Redlock: every other worker's clock runs an hour fast (its
    /// proposals; see `Builder::test_clock_ahead`).
    fast_clocks: bool,
    /// Waiters with backoffs of up to a minute (see [`SlowWaiters`]).
    slow_waiters: SlowWaiters,
    /// Each worker uses a watchdog, then works in a child it forks.
    forked_workers: Forks,
}

/// Whether workers work in a child they fork (see `worker::Settings::forks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forks {
    No,
    Yes,
    /// The negative control of forked workers: the child's lockers run
    /// without a watchdog, as a child's did before issue 38 (its
    /// watchdog never ran after the parent used one).
    ChildWithoutWatchdog,
}

/// Waiters whose backoff runs up to a minute: a queued waiter calls at
/// least once a second whatever its backoff, and a dead one keeps its
/// place (and a lock handed to it) for at most its bounded stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlowWaiters {
    No,
    Yes,
    /// The negative control of the bounded stay: as `Yes`, and at each
    /// waiter's kill a dead waiter whose place lasts a minute (as a stay
    /// taken from the backoff as given would) is put at the head of every
    /// lock's queue.
    UnboundedStay,
}

/// The longest backoff of slow waiters.
const SLOW_BACKOFF: Duration = Duration::from_secs(60);
/// How often a queued waiter calls, whatever its backoff (the library's
/// `MAX_QUEUED_PAUSE`): the longest pause the checker allows slow waiters.
const QUEUED_PAUSE: Duration = Duration::from_secs(1);

impl Scenario {
    fn one(kind: Kind) -> Scenario {
        Scenario {
            name: kind.name().to_owned(),
            redlock: false,
            sentinel: None,
            flaw: None,
            faults: vec![kind],
            soak: None,
            fast_clocks: false,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        }
    }
}

/// An operator breaks holds at random, often enough that some holders have
/// time left to be told.
const BREAKS: [Kind; 4] = [Kind::Break; 4];

fn main() {
    if let Ok(spec) = std::env::var(worker::ENV) {
        worker::main(&spec);
        return;
    }
    if let Ok(spec) = std::env::var(election::ENV) {
        election::worker_main(&spec);
        return;
    }
    if let Ok(spec) = std::env::var(delay::ENV) {
        delay::worker(&spec);
        return;
    }
    // Behave as a one-test libtest binary: `--list`, and name filters.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        // Not an ignored test: nothing to list when asked for those
        // (cargo-nextest asks, and skips whatever both lists name).
        if !args.iter().any(|a| a == "--ignored") {
            println!("chaos: test");
        }
        return;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| "chaos".contains(f.as_str())) {
        println!("chaos: filtered out");
        return;
    }
    selfcheck::all();
    election::checker_self_checks();
    delay::checker_finds_late_writes();
    cluster::checker_finds_late_takeups();
    let long = std::env::var("REDMUTEX_CHAOS").is_ok_and(|v| v == "long");
    let started = Instant::now();
    let mut failed = false;
    let mut totals = Totals::default();
    let mut scenarios = scenarios::all(long);

    let only = std::env::var("REDMUTEX_CHAOS_ONLY").ok();
    if let Some(only) = &only {
        scenarios.retain(|s| s.name.contains(only.as_str()));
    }
    for s in &scenarios {
        let out = run(s);
        println!("{:<52} {}", s.name, summary(&out.verdict));
        if out.clock_step > 20 * history::MS {
            println!(
                "    the wall clock moved {:.1} ms against the monotonic clock during this run",
                ms(out.clock_step)
            );
        }
        failed |= !linear::report_run(s, &out);
        if std::env::var("REDMUTEX_CHAOS_VERBOSE").is_ok() {
            for n in out.verdict.notes.iter().take(10) {
                println!("    excused: {n}");
            }
            for e in &out.events {
                println!(
                    "    event {:?} {}..{} w{:?} {:?} masters {:?}",
                    e.kind, e.start, e.end, e.worker, e.victims, e.masters
                );
            }
        }
        let mut rules: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &out.verdict.violations {
            *rules.entry(v.rule).or_default() += 1;
        }
        if !rules.is_empty() {
            println!("    violations by rule: {rules:?}");
        }
        for (v, why) in out.verdict.violations.iter().zip(&out.explained).take(10) {
            println!("    VIOLATION: {v}");
            print!("{why}");
        }
        if let Some(kept) = &out.kept {
            println!("    history kept in {}", kept.display());
        }
        failed |= !out.verdict.violations.is_empty();
        totals.add(s, &out);
    }

    // The negative controls: a locker broken in one way must trip the rule
    // that is there for that mistake.
    let controls = controls::run_all(&only, &mut failed);

    // The election scenario and its controls (see `election.rs`).
    let (election_runs, election_ok) = election::scenarios(only.as_deref());
    failed |= !election_ok;
    // Lock-delay: a paused holder's late writes to a resource that checks
    // no token, and the control without a lock-delay (see `delay.rs`).
    failed |= delay::scenario_and_control(only.as_deref());
    // A Redis Cluster: masters failed over and killed, a slot migrated
    // under waiters; the wake-up rule and its control (see `cluster.rs`).
    let (cluster_runs, cluster_ok) = cluster::scenario_and_control(only.as_deref(), long);
    failed |= !cluster_ok;

    let report = totals.report(&controls, started.elapsed());
    println!("\n{report}");
    if let Ok(path) = std::env::var("REDMUTEX_CHAOS_REPORT") {
        std::fs::write(&path, &report).expect("write the report");
    }
    if failed {
        eprintln!("the fault suite found violations (see above)");
        std::process::exit(1);
    }
    println!(
        "chaos: {} passed, 0 failed",
        scenarios.len() + controls.len() + election_runs + cluster_runs
    );
}

struct Outcome {
    verdict: Verdict,
    events: Vec<Event>,
    processes: usize,
    rejected: u64,
    failures: BTreeMap<String, u64>,
    /// How far the wall clock moved against the monotonic clock.
    clock_step: u64,
    /// Starving rounds asked for that never began (dropped from the faults).
    not_landed: usize,
    /// Per violation (in the verdict's order): the faults and records
    /// around it (see `history::explain`).
    explained: Vec<String>,
    /// Where the history of a run with violations was kept.
    kept: Option<PathBuf>,
    /// The linearizability workloads' histories, checked.
    linear: linear::Checks,
}
