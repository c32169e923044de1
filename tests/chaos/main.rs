//! The fault suite: worker processes contend for locks while faults are
//! injected, and a checker reads the recorded history.
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
mod delay;
mod election;
mod history;
mod worker;

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use broken::Flaw;
use common::{fence_in, Server, TempDir, SOMEONE_ELSE};
use history::{
    check, ms, now_ns, rule, summary, wall_offset_ns, Event, Kind, Limits, Verdict, WorkerLog,
    READ_SUFFIX,
};
use redmutex_testkit::proxy::{Mode, Proxy};
use worker::{
    resource_keys, Rng, Settings, FAST_KEYS, PREFIX, RW_NAME, SEM_NAME, SEM_PERMITS, SLOW_KEY,
};

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

/// Tampers enough that one of them finds a holder with time left to be told.
const TAMPERS: [Kind; 4] = [Kind::Del, Kind::ForeignSet, Kind::Del, Kind::Pexpire];

/// An operator breaks holds at random, often enough that some holders have
/// time left to be told.
const BREAKS: [Kind; 4] = [Kind::Break; 4];

/// Each negative control: the flaw, the faults that bring it out, and the
/// rule that must catch it.
const CONTROLS: [(Flaw, &[Kind], &str); 8] = [
    (Flaw::ReusesToken, &[], rule::FENCING),
    (Flaw::ResetsCounter, &[], rule::FENCING),
    (
        Flaw::ReleasesWithoutOwnerCheck,
        &[Kind::PauseHolder, Kind::PauseHolder],
        rule::EXCLUSION,
    ),
    (Flaw::IgnoresNotOurs, &TAMPERS, rule::LOSS_REPORT),
    (Flaw::NeverReleases, &[], rule::HANDOVER),
    (Flaw::NeverReportsLoss, &TAMPERS, rule::LOSS_REPORT),
    // A holder never told of an operator's break.
    (Flaw::NeverReportsLoss, &BREAKS, rule::LOSS_REPORT),
    (
        Flaw::RenewsThroughThePool,
        &[Kind::StarvePool, Kind::StarvePool],
        rule::STARVED,
    ),
];

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
    checker_knows_readers_from_writers();
    checker_explains_an_evicted_readers_set();
    checker_wants_demand_for_a_takeover();
    checker_times_a_loss_from_the_eviction_of_its_own_key();
    election::checker_self_checks();
    delay::checker_finds_late_writes();
    cluster::checker_finds_late_takeups();
    let long = std::env::var("REDMUTEX_CHAOS").is_ok_and(|v| v == "long");
    let started = Instant::now();
    let mut failed = false;
    let mut totals = Totals::default();

    let mut scenarios: Vec<Scenario> = Kind::ONE_SERVER.iter().map(|k| Scenario::one(*k)).collect();
    scenarios.push(Scenario {
        name: "Redlock over 3 masters".into(),
        redlock: true,
        sentinel: None,
        flaw: None,
        faults: REDLOCK_FAULTS.to_vec(),
        soak: None,
        fast_clocks: false,
        slow_waiters: SlowWaiters::No,
        forked_workers: Forks::No,
    });
    scenarios.push(Scenario {
        name: "Redlock: clocks an hour fast, every master restarted empty".into(),
        redlock: true,
        sentinel: None,
        flaw: None,
        faults: vec![Kind::KillAll; 3],
        soak: None,
        fast_clocks: true,
        slow_waiters: SlowWaiters::No,
        forked_workers: Forks::No,
    });
    scenarios.push(Scenario {
        name: "Redlock: one master hung across unlocks".into(),
        redlock: true,
        sentinel: None,
        flaw: None,
        faults: vec![Kind::HangMaster; 3],
        soak: None,
        fast_clocks: false,
        slow_waiters: SlowWaiters::No,
        forked_workers: Forks::No,
    });
    scenarios.push(Scenario {
        name: "Redlock: a majority eroded one master at a time".into(),
        redlock: true,
        sentinel: None,
        flaw: None,
        faults: vec![Kind::FlushTwo; 4],
        soak: None,
        fast_clocks: false,
        slow_waiters: SlowWaiters::No,
        forked_workers: Forks::No,
    });
    for (replicas, name) in [
        (0, "Sentinel failover while holding"),
        (1, "Sentinel failover while holding, min_replicas 1"),
    ] {
        scenarios.push(Scenario {
            name: name.into(),
            redlock: false,
            sentinel: Some(replicas),
            flaw: None,
            faults: vec![Kind::Failover; if long { 3 } else { 1 }],
            soak: None,
            fast_clocks: false,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        });
    }
    if long {
        scenarios.push(Scenario {
            name: "Sentinel soak: failovers and holder faults, mixed".into(),
            redlock: false,
            sentinel: Some(1),
            flaw: None,
            faults: SENTINEL_FAULTS.to_vec(),
            soak: Some(Duration::from_secs(60)),
            fast_clocks: false,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        });
        scenarios.push(Scenario {
            name: "soak: every fault, mixed".into(),
            redlock: false,
            sentinel: None,
            flaw: None,
            // An operator's breaks too (their own scenario in the short
            // profile).
            faults: [&Kind::ONE_SERVER[..], &[Kind::Break]].concat(),
            soak: Some(Duration::from_secs(240)),
            fast_clocks: false,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        });
        scenarios.push(Scenario {
            name: "Redlock soak: every fault, mixed".into(),
            redlock: true,
            sentinel: None,
            flaw: None,
            faults: REDLOCK_FAULTS.to_vec(),
            soak: Some(Duration::from_secs(90)),
            fast_clocks: true,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        });
    }
    scenarios.push(Scenario {
        name: "waiters with 60 s backoffs killed while queued".into(),
        faults: vec![Kind::KillWaiter; 3],
        slow_waiters: SlowWaiters::Yes,
        forked_workers: Forks::No,
        ..Scenario::one(Kind::KillWaiter)
    });
    scenarios.push(Scenario {
        name: "operator breaks holds at random".into(),
        faults: BREAKS.to_vec(),
        ..Scenario::one(Kind::Break)
    });
    scenarios.push(Scenario {
        name: "forked workers (after a watchdog in the parent)".into(),
        faults: vec![
            Kind::KillHolder,
            Kind::KillWaiter,
            Kind::Del,
            Kind::PauseServer,
        ],
        forked_workers: Forks::Yes,
        ..Scenario::one(Kind::KillHolder)
    });
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
    let mut controls = Vec::new();
    for (flaw, faults, expected) in CONTROLS {
        let s = Scenario {
            name: if faults.contains(&Kind::Break) {
                format!("negative control: {}, operator breaks", flaw.code())
            } else {
                format!("negative control: {}", flaw.code())
            },
            redlock: false,
            sentinel: None,
            flaw: Some(flaw),
            faults: faults.to_vec(),
            soak: None,
            fast_clocks: false,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        };
        if only
            .as_ref()
            .is_some_and(|o| !s.name.contains(o.as_str()) && !o.contains("control"))
        {
            continue;
        }
        let out = run(&s);
        let tripped = out.verdict.count(expected);
        println!(
            "{:<52} {tripped} [{expected}] violations, {} in all (expected: some [{expected}])",
            s.name,
            out.verdict.violations.len()
        );
        if let Some(v) = out.verdict.violations.iter().find(|v| v.rule == expected) {
            println!("    e.g. {v}");
        }
        if tripped == 0 {
            println!("    FAILED: the [{expected}] rule saw nothing wrong with this broken locker");
            failed = true;
        }
        controls.push((flaw, expected, tripped));
    }

    // The forked workers' control: a child whose lockers renew nothing
    // loses its long holds, unaware.
    let s = Scenario {
        name: "negative control: child-without-watchdog".into(),
        faults: vec![],
        forked_workers: Forks::ChildWithoutWatchdog,
        ..Scenario::one(Kind::KillHolder)
    };
    if only
        .as_ref()
        .is_none_or(|o| s.name.contains(o.as_str()) || o.contains("control"))
    {
        let out = run(&s);
        let expected = rule::KEPT;
        let tripped = out.verdict.count(expected);
        println!(
            "{:<52} {tripped} [{expected}] violations, {} in all (expected: some [{expected}])",
            s.name,
            out.verdict.violations.len()
        );
        if let Some(v) = out.verdict.violations.iter().find(|v| v.rule == expected) {
            println!("    e.g. {v}");
        }
        if tripped == 0 {
            println!("    FAILED: the [{expected}] rule saw nothing wrong with a child whose leases are not renewed");
            failed = true;
        }
    }

    // The bounded stay's control: a dead waiter whose place lasts a minute
    // keeps a released lock from everyone far past the bound.
    let s = Scenario {
        name: "negative control: unbounded-stay".into(),
        faults: vec![Kind::KillWaiter; 2],
        slow_waiters: SlowWaiters::UnboundedStay,
        forked_workers: Forks::No,
        ..Scenario::one(Kind::KillWaiter)
    };
    if only
        .as_ref()
        .is_none_or(|o| s.name.contains(o.as_str()) || o.contains("control"))
    {
        let out = run(&s);
        let expected = rule::TAKEOVER;
        let tripped = out.verdict.count(expected);
        println!(
            "{:<52} {tripped} [{expected}] violations, {} in all (expected: some [{expected}])",
            s.name,
            out.verdict.violations.len()
        );
        if let Some(v) = out.verdict.violations.iter().find(|v| v.rule == expected) {
            println!("    e.g. {v}");
        }
        if tripped == 0 {
            println!("    FAILED: the [{expected}] rule saw nothing wrong with a dead waiter's minute-long stay");
            failed = true;
        }
    }

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

const SENTINEL_FAULTS: [Kind; 5] = [
    Kind::Failover,
    Kind::Failover,
    Kind::KillHolder,
    Kind::KillWaiter,
    Kind::PauseHolder,
];

const REDLOCK_FAULTS: [Kind; 14] = [
    Kind::KillHolder,
    Kind::KillWaiter,
    Kind::PauseHolder,
    Kind::PauseServer,
    Kind::Del,
    Kind::FlushAll,
    Kind::ScriptFlush,
    Kind::ClientKill,
    Kind::StarvePool,
    Kind::FlushTwo,
    Kind::KillTwo,
    Kind::SkewMaster,
    Kind::KillAll,
    Kind::HangMaster,
];

/// Whether a worker's record file shows a starving round begun after its
/// first `from` bytes.
fn starving_since(path: &std::path::Path, from: u64) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(from))?;
            f.read_to_string(&mut text)
        })
        .is_ok_and(|_| text.lines().any(|l| l.starts_with("B ")))
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
}

/// Figures per fault kind, over every scenario.
#[derive(Default)]
struct PerKind {
    injected: usize,
    /// Per master (Redlock faults on some masters only).
    per_master: BTreeMap<usize, usize>,
    violations: usize,
    excused: u64,
    loss_report: Option<u64>,
    takeover: Option<u64>,
}

#[derive(Default)]
struct Totals {
    acquisitions: u64,
    processes: usize,
    violations: usize,
    stale_accepted: u64,
    rejected: u64,
    excused: BTreeMap<String, u64>,
    known_before: u64,
    told_by_deadline: u64,
    starved: (u64, usize),
    kinds: BTreeMap<Kind, PerKind>,
    soak_violations: usize,
    failures: BTreeMap<String, u64>,
    clock_step: u64,
    /// Each violation with the faults and records around it, by scenario.
    explained: String,
}

impl Totals {
    fn add(&mut self, s: &Scenario, o: &Outcome) {
        let v = &o.verdict;
        if !v.violations.is_empty() {
            self.explained += &format!("\n### {}\n\n", s.name);
            if let Some(kept) = &o.kept {
                self.explained += &format!("History kept in `{}`.\n\n", kept.display());
            }
            for (v, why) in v.violations.iter().zip(&o.explained) {
                self.explained += &format!("- {v}\n");
                if !why.is_empty() {
                    self.explained += &format!("\n```\n{why}```\n");
                }
            }
        }
        self.acquisitions += v.acquisitions;
        self.processes += o.processes;
        self.violations += v.violations.len();
        self.stale_accepted += v.stale_accepted;
        self.rejected += o.rejected;
        self.known_before += v.known_before;
        self.told_by_deadline += v.told_by_deadline;
        self.starved.0 += v.starved_landed;
        self.starved.1 += o.not_landed;
        for (why, n) in &v.excused {
            *self.excused.entry(why.clone()).or_default() += n;
        }
        for e in &o.events {
            let k = self.kinds.entry(e.kind).or_default();
            k.injected += 1;
            for m in &e.masters {
                *k.per_master.entry(*m).or_default() += 1;
            }
            if matches!(e.kind, Kind::StarvePool | Kind::StarveCut) {
                self.starved.1 += 1;
            }
        }
        for (kind, t) in &v.loss_report {
            let k = self.kinds.entry(*kind).or_default();
            k.loss_report = k.loss_report.max(Some(*t));
        }
        for (kind, t) in &v.takeover {
            let k = self.kinds.entry(*kind).or_default();
            k.takeover = k.takeover.max(Some(*t));
        }
        if s.soak.is_some() {
            self.soak_violations += v.violations.len();
        } else if let Some(kind) = s
            .faults
            .first()
            .filter(|k| s.faults.iter().all(|f| f == *k))
        {
            let k = self.kinds.entry(*kind).or_default();
            k.violations += v.violations.len();
            k.excused += v.excused_total();
        }
        add_counts(&mut self.failures, &o.failures);
        self.clock_step = self.clock_step.max(o.clock_step);
    }

    fn report(&self, controls: &[(Flaw, &str, usize)], took: Duration) -> String {
        let opt = |v: Option<u64>| v.map_or("n/a".to_owned(), |t| format!("{:.0} ms", ms(t)));
        let mut s = String::new();
        s += "| figure | value |\n|---|---|\n";
        s += &format!("| acquisitions | {} |\n", self.acquisitions);
        s += &format!("| worker processes | {} |\n", self.processes);
        s += &format!("| violations | {} |\n", self.violations);
        s += &format!("| of which in the soaks | {} |\n", self.soak_violations);
        s += &format!("| stale writes accepted | {} |\n", self.stale_accepted);
        s += &format!(
            "| stale reads and writes rejected by the fence | {} |\n",
            self.rejected
        );
        s += &format!(
            "| overlaps whose older holder had been told before | {} |\n",
            self.known_before
        );
        s += &format!(
            "| losses told by the lease's deadline (a fault blocked the renewal) | {} |\n",
            self.told_by_deadline
        );
        s += &format!(
            "| starving rounds that took the pool (recorded by the worker) | {} of {} |\n",
            self.starved.0, self.starved.1
        );
        s += &format!(
            "| largest wall-clock step against the monotonic clock in a scenario | {:.1} ms |\n",
            ms(self.clock_step)
        );
        s += &format!("| run time | {:.0} s |\n", took.as_secs_f64());
        s += "\n| fault | injected | per master | violations (own scenario) | overlaps excused (own scenario) | max loss report | max takeover |\n|---|---|---|---|---|---|---|\n";
        for (k, f) in &self.kinds {
            let masters = if f.per_master.is_empty() {
                "".to_owned()
            } else {
                f.per_master
                    .iter()
                    .map(|(m, n)| format!("m{m}: {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            s += &format!(
                "| {} | {} | {masters} | {} | {} | {} | {} |\n",
                k.name(),
                f.injected,
                f.violations,
                f.excused,
                opt(f.loss_report),
                opt(f.takeover)
            );
        }
        s += "\n| overlaps excused, by why (holder told, fenced off) | count |\n|---|---|\n";
        for (why, n) in &self.excused {
            s += &format!("| {why} | {n} |\n");
        }
        s +=
            "\n| negative control | rule it must trip | violations of that rule |\n|---|---|---|\n";
        for (flaw, expected, n) in controls {
            s += &format!("| {} | {expected} | {n} |\n", flaw.code());
        }
        s += "\n| failed lock calls (bounded errors) | count |\n|---|---|\n";
        for (k, n) in &self.failures {
            s += &format!("| {k} | {n} |\n");
        }
        if !self.explained.is_empty() {
            s += "\n## Violations, with the faults and records around each\n\n";
            s += "Times are against the violation's moment (an overlap: the newer holder's entry); `*` marks the sections it names.\n";
            s += &self.explained;
        }
        s
    }
}

struct Worker {
    id: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its own way to the server (single-server scenarios).
    proxy: Option<Proxy>,
    /// When it was last told to starve its pool.
    starved: Option<Instant>,
}

/// One scenario's servers, workers and record of faults.
struct Run<'a> {
    scenario: &'a Scenario,
    servers: Vec<Server>,
    /// Redlock: one proxy in front of each master.
    master_proxies: Vec<Proxy>,
    /// Sentinel: the sentinels watching `servers` (a master and a replica).
    sentinels: Option<common::Sentinels>,
    resource: Server,
    dir: TempDir,
    workers: Vec<Worker>,
    next_id: u32,
    events: Vec<Event>,
    killed: HashSet<u32>,
    /// The worker that logs in without channel rights.
    acl_worker: Option<u32>,
    /// The wall clock's offset from the monotonic clock, lowest and highest
    /// seen (nanoseconds).
    wall: (i128, i128),
    violations: Vec<history::Violation>,
    rng: Rng,
}

fn run(scenario: &Scenario) -> Outcome {
    let mut servers: Vec<Server> = (0..if scenario.redlock { 3 } else { 1 })
        .map(|_| Server::start())
        .collect();
    let sentinels = scenario.sentinel.map(|_| {
        servers.push(Server::replica_of(&servers[0]));
        common::Sentinels::watch(&servers[0])
    });
    let master_proxies = if scenario.redlock {
        servers.iter().map(|s| Proxy::start(s.port())).collect()
    } else {
        Vec::new()
    };
    let mut r = Run {
        scenario,
        servers,
        master_proxies,
        sentinels,
        resource: Server::start(),
        dir: TempDir::new("chaos"),
        workers: Vec::new(),
        next_id: 0,
        events: Vec::new(),
        killed: HashSet::new(),
        acl_worker: None,
        wall: (wall_offset_ns(), wall_offset_ns()),
        violations: Vec::new(),
        rng: Rng::new(now_ns()),
    };
    r.add_acl_user();
    for _ in 0..WORKERS {
        r.spawn();
    }
    r.await_first_entries();
    match scenario.soak {
        None => {
            for &k in &scenario.faults {
                r.inject(k);
                std::thread::sleep(GAP);
            }
            if scenario.faults.is_empty() {
                std::thread::sleep(GAP * 2);
            }
        }
        Some(d) => {
            let until = Instant::now() + d;
            while Instant::now() < until {
                let k = scenario.faults[r.rng.below(scenario.faults.len() as u64) as usize];
                r.inject(k);
                std::thread::sleep(Duration::from_millis(300 + r.rng.below(1200)));
            }
            std::thread::sleep(GAP);
        }
    }
    r.finish()
}

impl Run<'_> {
    /// The ACL user without channel rights (again after a restart: users are
    /// configuration, not data).
    fn add_acl_user(&self) {
        for s in &self.servers {
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(NO_CHANNELS)
                .arg(&["on", ">secret", "~*", "+@all", "resetchannels"][..])
                .query(&mut s.conn())
                .unwrap();
        }
    }

    fn log_path(&self, id: u32) -> PathBuf {
        self.dir.0.join(format!("worker-{id}.log"))
    }

    fn spawn(&mut self) {
        let id = self.next_id;
        self.next_id += 1;
        let (proxy, lock_urls) = if let Some(sentinels) = &self.sentinels {
            (None, sentinels.urls())
        } else if self.scenario.redlock {
            (None, self.master_proxies.iter().map(Proxy::url).collect())
        } else {
            let proxy = Proxy::start(self.servers[0].port());
            // One real worker at a time logs in as a user without channel
            // rights: no release announcements for it, only its backoff.
            let acl = self.scenario.flaw.is_none()
                && self.acl_worker.is_none_or(|w| self.killed.contains(&w));
            if acl {
                self.acl_worker = Some(id);
            }
            let url = if acl {
                format!("redis://{NO_CHANNELS}:secret@127.0.0.1:{}/", proxy.port())
            } else {
                proxy.url()
            };
            (Some(proxy), vec![url])
        };
        let settings = Settings {
            id,
            lock_urls,
            resource_url: self.resource.url(),
            out: self.log_path(id),
            ttl: TTL,
            io: IO,
            backoff_max: if self.scenario.slow_waiters == SlowWaiters::No {
                BACKOFF_MAX
            } else {
                SLOW_BACKOFF
            },
            flaw: self.scenario.flaw,
            forks: match self.scenario.forked_workers {
                Forks::No => 0,
                Forks::Yes => 1,
                Forks::ChildWithoutWatchdog => 2,
            },
            sentinel: self.scenario.sentinel,
            cluster: false,
            clock_ahead: if self.scenario.fast_clocks && id.is_multiple_of(2) {
                Duration::from_secs(3600)
            } else {
                Duration::ZERO
            },
        };
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .env(worker::ENV, settings.encode())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a worker process");
        let stdin = child.stdin.take();
        self.workers.push(Worker {
            id,
            child,
            stdin,
            proxy,
            starved: None,
        });
    }

    /// Waits until every worker has recorded a critical section.
    fn await_first_entries(&self) {
        common::wait_until(
            "every worker in a critical section",
            Duration::from_secs(30),
            || {
                self.workers.iter().all(|w| {
                    std::fs::read_to_string(self.log_path(w.id)).is_ok_and(|t| t.contains("E "))
                })
            },
        );
    }

    fn conn(&self, i: usize) -> redis::Connection {
        self.servers[i].conn()
    }

    /// The worker holding the slow key, from the metadata in its value.
    fn holder(&mut self) -> usize {
        let give_up = Instant::now() + Duration::from_secs(3);
        while Instant::now() < give_up {
            for i in 0..self.servers.len() {
                // A server Sentinel is reconfiguring drops its clients.
                let Ok(mut c) = self.servers[i].try_conn() else {
                    continue;
                };
                let v: Option<String> = redis::cmd("GET")
                    .arg(format!("{PREFIX}:{SLOW_KEY}"))
                    .query(&mut c)
                    .unwrap_or(None);
                let id = v
                    .as_deref()
                    .and_then(|v| v.rsplit(':').next())
                    .and_then(|m| m.strip_prefix('w'))
                    .and_then(|n| n.parse::<u32>().ok());
                if let Some(pos) = id.and_then(|id| self.workers.iter().position(|w| w.id == id)) {
                    return pos;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        0
    }

    /// Every lock key on server `i`, as a victim.
    fn locks_on(&self, i: usize) -> Vec<(String, u64, Option<u32>)> {
        victims_of(self.read_locks(i, false).unwrap_or_default())
    }

    /// `FLUSHALL` on server `i`; the lock keys it took, as victims.
    fn flush(&self, i: usize) -> Vec<(String, u64, Option<u32>)> {
        victims_of(self.read_locks(i, true).expect("FLUSHALL"))
    }

    /// The suite's string keys on server `i` with their values, then a
    /// `FLUSHALL` in the same script if `flush`.
    fn read_locks(&self, i: usize, flush: bool) -> redis::RedisResult<Vec<(String, String)>> {
        redis::Script::new(READ_LOCKS)
            .arg(format!("{PREFIX}:*"))
            .arg(if flush { "flush" } else { "" })
            .invoke(&mut self.conn(i))
    }

    /// Puts a dead waiter at the head of every lock's queue, with a place
    /// (and a claim, when handed the lock) that lasts a minute.
    fn queue_ghost(&self) {
        let mut c = self.conn(0);
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut c).expect("TIME");
        let now_ms = secs * 1000 + micros / 1000;
        let stay = SLOW_BACKOFF.as_millis();
        for key in FAST_KEYS.iter().chain([&SLOW_KEY]) {
            let (queue, waiters) = common::queue_keys(Some(PREFIX), key);
            let _: () = redis::pipe()
                .cmd("ZADD")
                .arg(&queue)
                .arg(1)
                .arg("ghost")
                .ignore()
                .cmd("HSET")
                .arg(&waiters)
                .arg("ghost")
                .arg(format!("{now_ms}:{stay}:{stay}:ghost"))
                .ignore()
                .query(&mut c)
                .expect("queue a dead waiter");
        }
    }

    fn kill_worker(&mut self, pos: usize) -> u32 {
        let mut w = self.workers.remove(pos);
        w.child.kill().expect("kill -9 a worker");
        let _ = w.child.wait();
        self.killed.insert(w.id);
        self.spawn();
        w.id
    }

    /// Memory pressure on server 0: `maxmemory` just above what it uses,
    /// `volatile-ttl`, and filler keys without a TTL until a write fails
    /// with OOM (every key with a TTL has been evicted by then); the
    /// pressure stays a second, then goes. When it began, and the locks
    /// evicted (as keyspace notifications name them, with the values read
    /// just before).
    fn evict(&self) -> (u64, Vec<(String, u64)>) {
        let server = &self.servers[0];
        let mut c = server.conn();
        server.config_set("notify-keyspace-events", "Ee");
        // Every eviction, heard as it happens.
        let mut sub = self.conn(0);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (listening, heard) = std::sync::mpsc::channel();
        let listener = {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut evicted = sub.as_pubsub();
                evicted
                    .subscribe("__keyevent@0__:evicted")
                    .expect("subscribe to evictions");
                evicted
                    .set_read_timeout(Some(Duration::from_millis(50)))
                    .expect("timeout");
                let _ = listening.send(());
                let mut out = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    if let Ok(msg) = evicted.get_message() {
                        let key: String = msg.get_payload().unwrap_or_default();
                        if let Some(name) = lock_name(&key) {
                            out.push((name, now_ns()));
                        }
                    }
                }
                out
            })
        };
        heard.recv().expect("the eviction listener");
        let info: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
        let used: u64 = common::info_field(&info, "used_memory")
            .and_then(|v| v.parse().ok())
            .expect("used_memory");
        server.config_set("maxmemory-policy", "volatile-ttl");
        let start = now_ns();
        server.config_set("maxmemory", &(used + 256 * 1024).to_string());
        let filler = "x".repeat(16 * 1024);
        let mut n = 0;
        while n < 1000 {
            let r: redis::RedisResult<()> = redis::cmd("SET")
                .arg(format!("filler:{n}"))
                .arg(&filler)
                .query(&mut c);
            n += 1;
            if r.is_err() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(1000));
        server.config_set("maxmemory", "0");
        for i in 0..n {
            let _: redis::RedisResult<()> =
                redis::cmd("DEL").arg(format!("filler:{i}")).query(&mut c);
        }
        server.config_set("maxmemory-policy", "noeviction");
        // Evictions still on their way.
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let evicted = listener.join().expect("the eviction listener");
        server.config_set("notify-keyspace-events", "");
        (start, evicted)
    }

    /// Sentinel: a forced failover (`SENTINEL FAILOVER`), until the old
    /// master has become a replica of the new one with its link up; the
    /// old master's position in `servers`.
    fn failover(&self) -> usize {
        let sentinels = self.sentinels.as_ref().expect("sentinels");
        let mut c = redis::Client::open(sentinels.urls()[0].as_str())
            .and_then(|c| c.get_connection())
            .expect("a sentinel");
        let master_port = |c: &mut redis::Connection| -> Option<u16> {
            let addr: Vec<String> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(worker::SENTINEL_MASTER)
                .query(c)
                .ok()?;
            addr.get(1)?.parse().ok()
        };
        let demoted = |i: usize| {
            // Sentinel drops the server's clients as it demotes it: a
            // connection refused or reset here means not yet.
            let Ok(mut c) = self.servers[i].try_conn() else {
                return false;
            };
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut c)
                .unwrap_or_default();
            common::info_field(&info, "role").as_deref() == Some("slave")
                && common::info_field(&info, "master_link_status").as_deref() == Some("up")
        };
        // A failover can be refused while the last one settles, or be
        // aborted by Sentinel; then it is asked for again.
        for _ in 0..5 {
            let Some(old) =
                master_port(&mut c).and_then(|p| self.servers.iter().position(|s| s.port() == p))
            else {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            };
            let asked = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(worker::SENTINEL_MASTER)
                .query::<()>(&mut c);
            if asked.is_err() {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            // Sentinel turns the old master into a replica when it next
            // looks at it (about every 10 s).
            let give_up = Instant::now() + Duration::from_secs(60);
            while Instant::now() < give_up {
                if demoted(old) {
                    return old;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("Sentinel did not fail over in five tries");
    }

    /// Tells a worker that has not starved for a while to run a starving
    /// round (one at a time per worker: each can wait seconds for the slow
    /// key); its position.
    fn starve(&mut self) -> Option<usize> {
        let now = Instant::now();
        let pos = self.workers.iter().position(|w| {
            w.starved
                .is_none_or(|t| now.duration_since(t) > Duration::from_secs(20))
        })?;
        let w = &mut self.workers[pos];
        w.starved = Some(now);
        let stdin = w.stdin.as_mut().expect("a worker's stdin");
        stdin
            .write_all(b"starve\n")
            .expect("tell a worker to starve");
        stdin.flush().expect("flush");
        Some(pos)
    }

    /// Sets the proxy of the worker at `pos` to `mode` for `hold`.
    fn cut(&mut self, pos: usize, mode: Mode, hold: Duration) -> u32 {
        let w = &self.workers[pos];
        let proxy = w.proxy.as_ref().expect("a proxy per worker");
        proxy.set(mode);
        std::thread::sleep(hold);
        proxy.set(Mode::Pass);
        w.id
    }

    fn inject(&mut self, kind: Kind) {
        self.watch_clock();
        let start = now_ns();
        let redlock = self.scenario.redlock;
        let mut event = Event {
            kind,
            start,
            end: start,
            worker: None,
            victims: Vec::new(),
            loses: !redlock,
            masters: Vec::new(),
            evicted: Vec::new(),
        };
        match kind {
            Kind::KillHolder => {
                let pos = self.holder();
                event.start = now_ns();
                event.worker = Some(self.kill_worker(pos));
            }
            Kind::KillWaiter => {
                let holder = self.holder();
                let pos = (holder + 1 + self.rng.below(self.workers.len() as u64 - 1) as usize)
                    % self.workers.len();
                event.start = now_ns();
                event.worker = Some(self.kill_worker(pos));
                if self.scenario.slow_waiters == SlowWaiters::UnboundedStay {
                    self.queue_ghost();
                }
            }
            Kind::PauseHolder => {
                let pos = self.holder();
                let w = &self.workers[pos];
                let pid = Pid::from_raw(w.child.id() as i32);
                event.worker = Some(w.id);
                event.start = now_ns();
                kill(pid, Signal::SIGSTOP).expect("SIGSTOP a worker");
                std::thread::sleep(TTL * 2);
                kill(pid, Signal::SIGCONT).expect("SIGCONT a worker");
            }
            Kind::PartitionHolder | Kind::CutHolderReplies | Kind::HalfOpenHolder => {
                let pos = self.holder();
                let mode = match kind {
                    Kind::PartitionHolder => Mode::Blackhole,
                    Kind::CutHolderReplies => Mode::StallReplies,
                    _ => Mode::StallExisting,
                };
                event.start = now_ns();
                event.worker = Some(self.cut(pos, mode, TTL * 2));
            }
            Kind::PauseServer => {
                event.masters = vec![0];
                self.servers[0].pause();
                std::thread::sleep(TTL * 3 / 2);
                self.servers[0].resume();
            }
            Kind::Del | Kind::ForeignSet | Kind::Pexpire => {
                let action = match kind {
                    Kind::Del => "del",
                    Kind::ForeignSet => "set",
                    _ => "pexpire",
                };
                event.masters = vec![0];
                (event.start, event.victims) = self.tamper(action);
            }
            Kind::Break => {
                event.masters = vec![0];
                (event.start, event.victims) = self.break_one();
            }
            Kind::FlushAll => {
                // The keys go while the script runs: count from before it.
                event.start = now_ns();
                event.masters = vec![0];
                event.victims = self.flush(0);
            }
            Kind::RestoreSnapshot | Kind::RestartAof | Kind::RestartEmpty => {
                self.restart(kind, &mut event);
            }
            Kind::Evict => {
                event.masters = vec![0];
                (event.start, event.evicted) = self.evict();
            }
            Kind::ScriptFlush => {
                for i in 0..self.servers.len() {
                    let _: () = redis::cmd("SCRIPT")
                        .arg("FLUSH")
                        .query(&mut self.conn(i))
                        .unwrap();
                }
            }
            Kind::ClientKill => {
                for i in 0..self.servers.len() {
                    for t in ["normal", "pubsub"] {
                        let _: i64 = redis::cmd("CLIENT")
                            .arg("KILL")
                            .arg("TYPE")
                            .arg(t)
                            .query(&mut self.conn(i))
                            .unwrap();
                    }
                }
            }
            Kind::ProxyDelay | Kind::ProxyBlackhole | Kind::ProxyDropReplies => {
                let (mode, hold) = match kind {
                    Kind::ProxyDelay => (Mode::Delay, Duration::from_millis(1000)),
                    Kind::ProxyBlackhole => (Mode::Blackhole, TTL * 3 / 2),
                    _ => (Mode::DropReplies, Duration::from_millis(1000)),
                };
                for w in &self.workers {
                    if let Some(p) = &w.proxy {
                        p.set(mode);
                    }
                }
                std::thread::sleep(hold);
                for w in &self.workers {
                    if let Some(p) = &w.proxy {
                        p.set(Mode::Pass);
                    }
                }
            }
            Kind::StarvePool => {
                let Some(pos) = self.starve() else {
                    return;
                };
                // Its window is the one the worker records (see
                // `history::land_starving`).
                event.worker = Some(self.workers[pos].id);
            }
            Kind::StarveCut => {
                let Some(pos) = self.starve() else {
                    return;
                };
                // Cut its replies once its starving round holds the lock
                // and has started taking the connections.
                let id = self.workers[pos].id;
                let path = self.log_path(id);
                let from = std::fs::metadata(&path).map_or(0, |m| m.len());
                let give_up = Instant::now() + Duration::from_secs(15);
                while !starving_since(&path, from) {
                    if Instant::now() > give_up {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                event.start = now_ns();
                event.worker = Some(self.cut(pos, Mode::StallReplies, TTL * 2));
            }
            Kind::FlushTwo => {
                let a = self.rng.below(3) as usize;
                let b = (a + 1 + self.rng.below(2) as usize) % 3;
                event.start = now_ns();
                event.masters = vec![a, b];
                event.victims = self.flush(a);
                std::thread::sleep(Duration::from_millis(400 + self.rng.below(800)));
                event.victims.extend(self.flush(b));
                // A renewal in between may have repaired the first loss.
                event.loses = false;
            }
            Kind::KillTwo => {
                let a = self.rng.below(3) as usize;
                let b = (a + 1 + self.rng.below(2) as usize) % 3;
                event.masters = vec![a, b];
                event.victims = self.locks_on(a);
                event.start = now_ns();
                self.servers[a].kill();
                self.servers[b].kill();
                std::thread::sleep(TTL * 3 / 2);
                self.servers[a].restart();
                self.servers[b].restart();
                self.add_acl_user();
                event.loses = true;
            }
            Kind::Failover => {
                // While the slow key is held: promote the replica.
                self.holder();
                event.start = now_ns();
                event.masters = vec![self.failover()];
            }
            Kind::KillAll => {
                // With fast clocks, while a fast worker holds the slow key
                // (its token far ahead), when one does within a few tries.
                for _ in 0..50 {
                    let pos = self.holder();
                    if !self.scenario.fast_clocks || self.workers[pos].id.is_multiple_of(2) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                event.masters = vec![0, 1, 2];
                event.victims = (0..3).flat_map(|i| self.locks_on(i)).collect();
                event.start = now_ns();
                for server in &mut self.servers {
                    server.kill();
                }
                std::thread::sleep(TTL * 3 / 2);
                for server in &mut self.servers {
                    server.restart();
                }
                self.add_acl_user();
                event.loses = true;
                // Every worker's breakers may skip every master for up to
                // the longest break (2 s) after they are back: no quorum
                // until then is part of this fault.
                std::thread::sleep(Duration::from_secs(2));
            }
            Kind::HangMaster => {
                // Long enough for a call to time out there (and its
                // breaker to trip), well short of the TTL.
                let a = self.rng.below(3) as usize;
                event.masters = vec![a];
                self.servers[a].pause();
                std::thread::sleep(REDLOCK_IO * 3);
                self.servers[a].resume();
            }
            Kind::ClusterFailover | Kind::ClusterKill | Kind::SlotMigrate => {
                panic!("cluster faults are injected by cluster.rs")
            }
            Kind::SkewMaster => {
                let a = self.rng.below(3) as usize;
                event.masters = vec![a];
                self.master_proxies[a].set(Mode::Delay);
                std::thread::sleep(Duration::from_millis(1000));
                self.master_proxies[a].set(Mode::Pass);
            }
        }
        event.end = event.end.max(now_ns());
        self.events.push(event);
    }

    /// Turns server 0's AOF on or off.
    fn appendonly(&self, on: bool) {
        self.servers[0].config_set("appendonly", if on { "yes" } else { "no" });
    }

    /// Kills server 0 with `kill -9` and starts it again: from an RDB
    /// snapshot taken a moment before, from its AOF (fsync every second),
    /// or with no data at all.
    fn restart(&mut self, kind: Kind, event: &mut Event) {
        let pause = Duration::from_millis(200 + self.rng.below(600));
        match kind {
            Kind::RestoreSnapshot => {
                self.servers[0].save();
                std::thread::sleep(pause);
            }
            Kind::RestartAof => {
                self.appendonly(true);
                common::wait_until("the AOF is written", Duration::from_secs(10), || {
                    let info: String = redis::cmd("INFO")
                        .arg("persistence")
                        .query(&mut self.conn(0))
                        .unwrap();
                    common::info_field(&info, "aof_rewrite_in_progress").as_deref() == Some("0")
                        && common::info_field(&info, "aof_rewrite_scheduled").as_deref()
                            == Some("0")
                        && common::info_field(&info, "aof_enabled").as_deref() == Some("1")
                });
                std::thread::sleep(pause);
            }
            _ => {}
        }
        event.masters = vec![0];
        event.victims = self.locks_on(0);
        event.start = now_ns();
        match kind {
            Kind::RestartAof => {
                self.servers[0].restart_with(&["--appendonly", "yes", "--appendfsync", "everysec"])
            }
            Kind::RestartEmpty => {
                self.servers[0].kill();
                let dir = self.servers[0].dir();
                let _ = std::fs::remove_file(dir.join("dump.rdb"));
                let _ = std::fs::remove_dir_all(dir.join("appendonlydir"));
                self.servers[0].restart();
            }
            _ => self.servers[0].restart(),
        }
        if kind == Kind::RestartAof {
            // Later restarts load the RDB again.
            self.appendonly(false);
        }
        self.add_acl_user();
        // Every lock it held may be gone; only a restart with no data
        // surely takes them all.
        event.loses = kind == Kind::RestartEmpty;
        event.end = now_ns();
    }

    /// Takes the slow key away from its holder (`del`, `set`, `pexpire`),
    /// atomically with reading whose it was.
    /// Returns when it was sent (the key goes while it runs) and the victim.
    fn tamper(&mut self, action: &str) -> (u64, Vec<(String, u64, Option<u32>)>) {
        let key = format!("{PREFIX}:{SLOW_KEY}");
        let give_up = Instant::now() + Duration::from_secs(3);
        while Instant::now() < give_up {
            let sent = now_ns();
            let v: Option<String> = redis::Script::new(TAMPER)
                .key(&key)
                .arg(action)
                .arg(TTL.as_millis() as u64)
                .arg(SOMEONE_ELSE)
                .invoke(&mut self.conn(0))
                .expect("tamper");
            if let Some(v) = v {
                let found = victims_of(vec![(format!("{PREFIX}:{SLOW_KEY}"), v)]);
                if !found.is_empty() {
                    return (sent, found);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // The broken controls may leave nobody holding it for a while.
        if self.scenario.flaw.is_none() {
            self.violations.push(history::Violation::new(
                rule::TAKEOVER,
                format!("nobody held {SLOW_KEY} for 3 s (tamper {action})"),
            ));
        }
        (now_ns(), Vec::new())
    }

    /// An operator's break (`Locker::break_lock`) of a hold picked at random
    /// from the listing (`Locker::locks`). Returns when it was sent and the
    /// victim, as it was.
    fn break_one(&mut self) -> (u64, Vec<(String, u64, Option<u32>)>) {
        let operator = redmutex::Locker::builder(redmutex::pool(&self.servers[0].url()).unwrap())
            .prefix(PREFIX)
            .build()
            .unwrap();
        let give_up = Instant::now() + Duration::from_secs(3);
        while Instant::now() < give_up {
            let holds: Vec<_> = operator
                .locks()
                .unwrap_or_default()
                .into_iter()
                .filter(|h| lock_name(&format!("{PREFIX}:{}", h.key())).is_some())
                .collect();
            if !holds.is_empty() {
                // The slow key most often: its holder has time left to be
                // told by a renewal (a fast key's is mostly told at unlock).
                let slow = holds.iter().find(|h| h.key() == SLOW_KEY);
                let pick = match slow {
                    Some(slow) if self.rng.below(4) > 0 => slow,
                    _ => &holds[self.rng.below(holds.len() as u64) as usize],
                };
                let sent = now_ns();
                if let Ok(Some(was)) = operator.break_lock(pick.key(), "chaos: an operator's break")
                {
                    let value = format!("x:{}:{}", was.fencing_token(), was.metadata());
                    let found = victims_of(vec![(format!("{PREFIX}:{}", was.key()), value)]);
                    if !found.is_empty() {
                        return (sent, found);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.scenario.flaw.is_none() {
            self.violations.push(history::Violation::new(
                rule::TAKEOVER,
                "nothing held to break for 3 s".to_owned(),
            ));
        }
        (now_ns(), Vec::new())
    }

    /// Records where the wall clock stands against the monotonic clock.
    fn watch_clock(&mut self) {
        let o = wall_offset_ns();
        self.wall = (self.wall.0.min(o), self.wall.1.max(o));
    }

    fn finish(mut self) -> Outcome {
        self.watch_clock();
        let processes = self.next_id as usize;
        // Closing a worker's standard input tells it to stop.
        for w in &mut self.workers {
            w.stdin = None;
        }
        let give_up = Instant::now() + Duration::from_secs(30);
        for w in &mut self.workers {
            loop {
                match w.child.try_wait() {
                    Ok(Some(status)) => {
                        if !status.success() {
                            self.violations.push(history::Violation::new(
                                rule::CLEAN_END,
                                format!("worker {} exited with {status}", w.id),
                            ));
                        }
                        break;
                    }
                    _ if Instant::now() > give_up => {
                        self.violations.push(history::Violation::new(
                            rule::CLEAN_END,
                            format!("worker {} did not stop", w.id),
                        ));
                        let _ = w.child.kill();
                        let _ = w.child.wait();
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        if self.scenario.flaw.is_none() {
            for i in 0..self.servers.len() {
                self.leftovers(i);
            }
        }
        // The fenced counter lost no update.
        let mut rejected = 0;
        let mut res = self.resource.conn();
        for key in section_keys() {
            let [_, count, stats] = resource_keys(&key);
            let counter: u64 = redis::cmd("GET")
                .arg(&count)
                .query::<Option<u64>>(&mut res)
                .unwrap()
                .unwrap_or(0);
            let (accepted, rej): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
                .arg(&stats)
                .arg("accepted")
                .arg("rejected")
                .query(&mut res)
                .unwrap();
            rejected += rej.unwrap_or(0);
            if counter != accepted.unwrap_or(0) {
                self.violations.push(history::Violation::new(
                    rule::LOST_UPDATE,
                    format!(
                        "{key}: counter {counter} after {} accepted increments: updates were lost",
                        accepted.unwrap_or(0)
                    ),
                ));
            }
        }
        if let Ok(keep) = std::env::var("REDMUTEX_CHAOS_KEEP") {
            self.keep_logs(&PathBuf::from(keep));
        }
        let logs: Vec<WorkerLog> = (0..self.next_id)
            .map(|id| {
                let text = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
                WorkerLog::parse(id, &text)
            })
            .collect();
        let op = if self.scenario.redlock {
            REDLOCK_IO
        } else {
            IO
        };
        let mut limits = limits(op);
        limits.kept_leases = self.scenario.forked_workers != Forks::No;
        if self.scenario.slow_waiters != SlowWaiters::No {
            // A queued waiter calls at least this often, whatever its
            // backoff; its stay (a dead one's) is bounded by that pause and
            // one call.
            limits.backoff = nanos(QUEUED_PAUSE);
        }
        // The starving rounds as the workers recorded them, not as asked.
        let asked = self.events.len();
        history::land_starving(&mut self.events, &logs);
        let not_landed = asked - self.events.len();
        let mut verdict = check(
            &logs,
            &self.events,
            &limits,
            self.scenario.redlock,
            self.scenario.sentinel == Some(0),
        );
        verdict.violations.append(&mut self.violations);
        let explained: Vec<String> = verdict
            .violations
            .iter()
            .map(|v| history::explain(v, &logs, &self.events, &limits))
            .collect();
        // A real locker's violations: its history is kept, with the faults
        // injected, so that the report and these files explain it.
        let kept = (self.scenario.flaw.is_none() && !verdict.violations.is_empty()).then(|| {
            let to = self.keep_logs(&history_dir());
            let events: String = self.events.iter().map(|e| e.record() + "\n").collect();
            let _ = std::fs::write(to.join("events.txt"), events);
            let mut text = String::new();
            for (v, why) in verdict.violations.iter().zip(&explained) {
                text += &format!("{v}\n{why}\n");
            }
            let _ = std::fs::write(to.join("violations.txt"), text);
            to
        });
        let mut failures = BTreeMap::new();
        for l in &logs {
            add_counts(&mut failures, &l.failures);
        }
        let clock_step = u64::try_from(self.wall.1 - self.wall.0).unwrap_or(u64::MAX);
        Outcome {
            verdict,
            events: self.events,
            processes,
            rejected,
            failures,
            clock_step,
            not_landed,
            explained,
            kept,
        }
    }

    /// Copies every worker's record file to `<dir>/<scenario>/`; that
    /// directory.
    fn keep_logs(&self, dir: &std::path::Path) -> PathBuf {
        let to = dir.join(self.scenario.name.replace([' ', '/', ':'], "_"));
        std::fs::create_dir_all(&to).unwrap();
        for id in 0..self.next_id {
            let _ = std::fs::copy(self.log_path(id), to.join(format!("worker-{id}.log")));
        }
        to
    }

    /// Reads server `i`'s keyspace once, right after every worker stopped:
    /// a lock, a queue entry or a waiter left behind must belong to a worker
    /// that was killed (and expire on its own); anything else is a leftover.
    fn leftovers(&mut self, i: usize) {
        let dead = |meta: &str| {
            meta.strip_prefix('w')
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|id| self.killed.contains(&id))
        };
        let mut c = self.conn(i);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{PREFIX}:*"))
            .query(&mut c)
            .unwrap();
        let reserved = format!("{PREFIX}:__redmutex__:");
        let mut left = Vec::new();
        for k in keys {
            if let Some(rest) = k.strip_prefix(&reserved) {
                // The audit trail is kept, capped.
                if rest == "fence" || rest == "audit" {
                    continue;
                }
                // The marks of broken holds go by themselves, within the
                // broken key's TTL and 5 s.
                if rest == "marks" {
                    let pttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut c).unwrap_or(-1);
                    if pttl < 0 || pttl > (TTL + Duration::from_secs(5)).as_millis() as i64 {
                        left.push(format!("{k} (PTTL {pttl} ms)"));
                    }
                    continue;
                }
                // The set of a read-write lock's read holds: each one
                // left must be gone already or held by a killed worker.
                if rest.starts_with("rw-readers:") {
                    let members: Vec<String> = redis::cmd("SMEMBERS")
                        .arg(&k)
                        .query(&mut c)
                        .unwrap_or_default();
                    for m in members {
                        let v: Option<String> =
                            redis::cmd("GET").arg(&m).query(&mut c).unwrap_or(None);
                        let meta = v.as_deref().and_then(|v| v.rsplit(':').next());
                        if meta.is_some_and(|meta| !dead(meta)) {
                            left.push(format!("{k} (counts {m}, held by {meta:?})"));
                        }
                    }
                    continue;
                }
                // A semaphore's queue and a read-write lock's are kept as a
                // lock's; the latter's entries lead their metadata with the
                // waiter's kind (r or w).
                let rw = rest.starts_with("rw-");
                let rest = rest.strip_prefix("permit-").unwrap_or(rest);
                let rest = rest.strip_prefix("rw-").unwrap_or(rest);
                let meta_of = |entry: &str| -> String {
                    let meta = entry.splitn(4, ':').nth(3).unwrap_or_default();
                    let meta = if rw {
                        meta.get(1..).unwrap_or_default()
                    } else {
                        meta
                    };
                    meta.to_owned()
                };
                if rest.starts_with("waiters:") {
                    let entries: Vec<(String, String)> = redis::cmd("HGETALL")
                        .arg(&k)
                        .query(&mut c)
                        .unwrap_or_default();
                    for (_, entry) in entries {
                        let meta = meta_of(&entry);
                        if !dead(&meta) {
                            left.push(format!("{k} (a waiter of {meta})"));
                        }
                    }
                    continue;
                }
                if rest.starts_with("queue:") {
                    let members: Vec<String> = redis::cmd("ZRANGE")
                        .arg(&k)
                        .arg(0)
                        .arg(-1)
                        .query(&mut c)
                        .unwrap_or_default();
                    let waiters = k.replacen("queue:", "waiters:", 1);
                    for m in members {
                        let entry: Option<String> = redis::cmd("HGET")
                            .arg(&waiters)
                            .arg(&m)
                            .query(&mut c)
                            .unwrap_or(None);
                        let meta = entry.as_deref().map(meta_of).unwrap_or_default();
                        if !dead(&meta) {
                            left.push(format!("{k} (a queued waiter without a live entry)"));
                        }
                    }
                    continue;
                }
                if lock_name(&k).is_none() {
                    left.push(k);
                    continue;
                }
            }
            if lock_name(&k).is_some() {
                let v: Option<String> = redis::cmd("GET").arg(&k).query(&mut c).unwrap_or(None);
                let meta = v
                    .as_deref()
                    .and_then(|v| v.rsplit(':').next())
                    .unwrap_or_default();
                if !dead(meta) {
                    left.push(format!("{k} (held by {meta})"));
                }
            }
        }
        if !left.is_empty() {
            self.violations.push(history::Violation::new(
                rule::LEFTOVERS,
                format!("left on server {i} after the run: {left:?}"),
            ));
        }
    }
}

/// Lock keys and their values as victims: (lock name, fencing token, the
/// worker named in the metadata).
fn victims_of(values: Vec<(String, String)>) -> Vec<(String, u64, Option<u32>)> {
    values
        .into_iter()
        .filter_map(|(k, v)| {
            let worker = v
                .rsplit(':')
                .next()
                .and_then(|m| m.strip_prefix('w'))
                .and_then(|n| n.parse().ok());
            Some((lock_name(&k)?, fence_in(&v)?, worker))
        })
        .collect()
}

/// Adds the counts of `from` to `into`, key by key.
fn add_counts(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, n) in from {
        *into.entry(k.clone()).or_default() += n;
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// The lock name of a Redis key, if it is a lock key (not a counter, queue
/// or the broken locker's counter).
fn lock_name(redis_key: &str) -> Option<String> {
    let name = redis_key.strip_prefix(PREFIX)?.strip_prefix(':')?;
    // A semaphore's permit `i`: recorded as `<name>#<i>`.
    if let Some(permit) = name.strip_prefix("__redmutex__:permit:") {
        let (i, sem) = permit.split_once(':')?;
        return Some(format!("{sem}#{i}"));
    }
    // A read-write lock's writer, `<name>`; one of its read holds, or the
    // set of them (what a writer checks), `<name>.r`.
    if let Some(rw) = name.strip_prefix("__redmutex__:rw-write:") {
        return Some(rw.to_owned());
    }
    if let Some(read) = name.strip_prefix("__redmutex__:rw-read:") {
        let (_, rw) = read.split_once(':')?;
        return Some(format!("{rw}{READ_SUFFIX}"));
    }
    if let Some(rw) = name.strip_prefix("__redmutex__:rw-readers:") {
        return Some(format!("{rw}{READ_SUFFIX}"));
    }
    (!name.starts_with("__redmutex__") && name != "broken-fence").then(|| name.to_owned())
}

/// The keys the workers' sections are recorded under.
fn section_keys() -> Vec<String> {
    let permits = (0..SEM_PERMITS).map(|i| format!("{SEM_NAME}#{i}"));
    FAST_KEYS
        .iter()
        .chain([&SLOW_KEY])
        .map(|k| (*k).to_owned())
        .chain(permits)
        .chain([RW_NAME.to_owned()])
        .collect()
}

/// Reads the value of KEYS[1] and, if there was one, takes the key away:
/// ARGV[1] = del | set (ARGV[3]'s value, for ARGV[2] ms) | pexpire.
const TAMPER: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
if ARGV[1] == 'del' then redis.call('DEL', KEYS[1])
elseif ARGV[1] == 'set' then
  redis.call('SET', KEYS[1], ARGV[3] .. ':1:intruder', 'PX', ARGV[2])
else redis.call('PEXPIRE', KEYS[1], 1) end
return v
";

/// Reads every string key matching ARGV[1] with its value; then FLUSHALL
/// when ARGV[2] is "flush", so the victims are read atomically with it.
const READ_LOCKS: &str = r"
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local ok, v = pcall(redis.call, 'GET', k)
  if ok and v then table.insert(out, {k, v}) end
end
if ARGV[2] == 'flush' then redis.call('FLUSHALL') end
return out
";

/// Where the history of a run with violations is kept: under
/// `REDMUTEX_CHAOS_KEEP` when set, else beside the report
/// (`<REDMUTEX_CHAOS_REPORT>.history`), else in the temporary directory.
fn history_dir() -> PathBuf {
    if let Ok(keep) = std::env::var("REDMUTEX_CHAOS_KEEP") {
        return PathBuf::from(keep);
    }
    if let Ok(report) = std::env::var("REDMUTEX_CHAOS_REPORT") {
        return PathBuf::from(format!("{report}.history"));
    }
    std::env::temp_dir().join(format!("redmutex-chaos-history-{}", std::process::id()))
}

/// The bounds the checker holds a run to, with `op` the bound of one
/// operation.
fn limits(op: Duration) -> Limits {
    Limits {
        ttl: nanos(TTL),
        renew: nanos(TTL / 3),
        op: nanos(op),
        backoff: nanos(BACKOFF_MAX),
        slack: nanos(SLACK),
        kept_leases: false,
    }
}

/// The read-write rule on histories made up for it, before any run: read
/// holds may overlap each other, never a write hold.
fn checker_knows_readers_from_writers() {
    use history::{line, Op};
    let read = format!("{RW_NAME}{READ_SUFFIX}");
    // One section from `from` to `to` ms, fenced read and write done.
    let held = |key: &str, token: u64, from: u64, to: u64| {
        let ms = |t: u64| t * history::MS;
        let writes = if key == RW_NAME { Op::Ok } else { Op::Skipped };
        [
            line::enter(key, token, ms(from), ms(from)),
            line::read(key, token, ms(from)),
            line::exit(key, token, ms(to), Op::Ok, writes, ms(to), false),
            line::unlock(key, token, ms(to), history::Unlock::Ok),
            line::end(ms(to), 0),
        ]
        .concat()
    };
    let limits = limits(IO);
    let verdict = |texts: &[String]| {
        let logs: Vec<WorkerLog> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| WorkerLog::parse(u32::try_from(i).unwrap(), t))
            .collect();
        check(&logs, &[], &limits, false, false)
    };
    let readers = verdict(&[held(&read, 1, 0, 10), held(&read, 2, 5, 15)]);
    assert!(readers.violations.is_empty(), "{:?}", readers.violations);
    for (first, second) in [(read.as_str(), RW_NAME), (RW_NAME, read.as_str())] {
        let mixed = verdict(&[held(first, 1, 0, 10), held(second, 2, 5, 15)]);
        assert_eq!(
            mixed.count(rule::EXCLUSION),
            1,
            "a {first} hold overlapping a {second} hold: {:?}",
            mixed.violations
        );
    }
}

/// The set of read holds evicted while a reader's key stays lets a writer
/// in (issue 38, hole 9): a reader whose release said it had lost the hold
/// is a victim of the eviction, and the overlap is excused; one whose
/// release said `Ok` is a violation, and its report names the eviction
/// and both sections, with their times against the writer's entry.
fn checker_explains_an_evicted_readers_set() {
    use history::{line, Op, Unlock};
    let read = format!("{RW_NAME}{READ_SUFFIX}");
    let ms = |t: u64| t * history::MS;
    let reader = |unlock: Unlock| {
        [
            line::enter(&read, 1, ms(100), ms(99)),
            line::read(&read, 1, ms(100)),
            line::exit(&read, 1, ms(104), Op::Ok, Op::Skipped, ms(104), false),
            line::unlock(&read, 1, ms(105), unlock),
            line::end(ms(200), 0),
        ]
        .concat()
    };
    let writer = [
        line::enter(RW_NAME, 2, ms(102), ms(101)),
        line::read(RW_NAME, 2, ms(102)),
        line::exit(RW_NAME, 2, ms(106), Op::Ok, Op::Ok, ms(106), false),
        line::unlock(RW_NAME, 2, ms(107), Unlock::Ok),
        line::end(ms(200), 0),
    ]
    .concat();
    let eviction = Event {
        kind: Kind::Evict,
        start: ms(50),
        end: ms(150),
        worker: None,
        victims: Vec::new(),
        loses: true,
        masters: vec![0],
        evicted: vec![(read.clone(), ms(101))],
    };
    let limits = limits(IO);
    let verdict = |unlock: Unlock| {
        let logs = vec![
            WorkerLog::parse(0, &reader(unlock)),
            WorkerLog::parse(1, &writer),
        ];
        let v = check(
            &logs,
            std::slice::from_ref(&eviction),
            &limits,
            false,
            false,
        );
        let why: Vec<String> = v
            .violations
            .iter()
            .map(|x| history::explain(x, &logs, std::slice::from_ref(&eviction), &limits))
            .collect();
        (v, why)
    };
    let (told, _) = verdict(Unlock::Lost);
    assert_eq!(told.count(rule::EXCLUSION), 0, "{:?}", told.violations);
    assert_eq!(told.excused_total(), 1);
    let (untold, why) = verdict(Unlock::Ok);
    assert_eq!(untold.count(rule::EXCLUSION), 1, "{:?}", untold.violations);
    let why = why.concat();
    for part in [
        "fault: maxmemory volatile-ttl",
        "evicted (heard) rw.r at -1.0 ms",
        "* w0 rw.r token 1: asked -3.0 ms, entered -2.0 ms",
        "unlock +3.0 ms ok",
        "* w1 rw token 2",
    ] {
        assert!(why.contains(part), "{part:?} missing from:\n{why}");
    }
}

/// A lock never held again after the first release that followed a
/// waiter's kill is a [takeover] violation only when someone wanted it: a
/// live worker's lock call on it that waited past the bound. A run that
/// goes on with other keys only (every live worker busy elsewhere, as with
/// random keys and long backoffs) proves nothing.
fn checker_wants_demand_for_a_takeover() {
    use history::{line, Op, Unlock};
    let ms = |t: u64| t * history::MS;
    let held = |key: &str, token: u64, from: u64, to: u64| {
        [
            line::enter(key, token, ms(from), ms(from)),
            line::read(key, token, ms(from)),
            line::exit(key, token, ms(to), Op::Ok, Op::Ok, ms(to), false),
            line::unlock(key, token, ms(to), Unlock::Ok),
        ]
        .concat()
    };
    let kill = Event {
        kind: Kind::KillWaiter,
        start: ms(1_000),
        end: ms(1_002),
        worker: Some(0),
        victims: Vec::new(),
        loses: true,
        masters: Vec::new(),
        evicted: Vec::new(),
    };
    // k1 released 5 s after the kill, then only k0 taken (in turn), for
    // 20 s more.
    let releaser = [held("k1", 1, 5_990, 6_000), line::end(ms(30_000), 0)].concat();
    let busy: String = (0..40)
        .map(|i| held("k0", 10 + i, 6_100 + i * 500, 6_500 + i * 500))
        .collect();
    let limits = limits(IO);
    let verdict = |others: &str| {
        let logs = vec![
            WorkerLog::parse(0, ""),
            WorkerLog::parse(1, &releaser),
            WorkerLog::parse(
                2,
                &[busy.as_str(), others, &line::end(ms(30_000), 0)].concat(),
            ),
        ];
        check(&logs, std::slice::from_ref(&kill), &limits, false, false)
    };
    let idle = verdict("");
    assert_eq!(idle.count(rule::TAKEOVER), 0, "{:?}", idle.violations);
    // A k1 call asked just after the release, failed 10 s later.
    let wanted = verdict(&line::failed(ms(16_001), "timeout", "k1", ms(6_001)));
    assert_eq!(wanted.count(rule::TAKEOVER), 1, "{:?}", wanted.violations);
    // Held again late, but asked for only just before (long run H1, Redlock
    // soak: k0 held again 871.5 ms after the release, every live worker's
    // next call on it asked 867 ms after the release): the lock was free
    // and nobody wanted it, no violation.
    let late_ask = [
        line::enter("k1", 90, ms(9_010), ms(9_000)),
        line::read("k1", 90, ms(9_010)),
        line::exit("k1", 90, ms(9_020), Op::Ok, Op::Ok, ms(9_020), false),
        line::unlock("k1", 90, ms(9_020), Unlock::Ok),
    ]
    .concat();
    let asked_late = verdict(&late_ask);
    assert_eq!(
        asked_late.count(rule::TAKEOVER),
        0,
        "{:?}",
        asked_late.violations
    );
    // Asked just after the release and held only 3 s later: a violation.
    let asked_early = [
        line::enter("k1", 90, ms(9_010), ms(6_001)),
        line::read("k1", 90, ms(9_010)),
        line::exit("k1", 90, ms(9_020), Op::Ok, Op::Ok, ms(9_020), false),
        line::unlock("k1", 90, ms(9_020), Unlock::Ok),
    ]
    .concat();
    let slow = verdict(&asked_early);
    assert_eq!(slow.count(rule::TAKEOVER), 1, "{:?}", slow.violations);
}

/// An eviction heard just before a holder recorded its entry took the
/// previous holder's key (the newer one's `SET NX` came right after it)
/// when the newer key is evicted later with nobody entering in between:
/// the newer holder's loss is timed from that later eviction (chaos-long,
/// soak mixed: `slow` token 1795621640004510, told at its second renewal,
/// 129 ms after its key went, was reported 669 ms late, timed from the
/// eviction of the holder before it). Told too late after its own key's
/// eviction, it is still a violation.
fn checker_times_a_loss_from_the_eviction_of_its_own_key() {
    use history::{line, Op, Unlock};
    let ms = |t: u64| t * history::MS;
    let held = |token: u64, asked: u64, from: u64, told: u64| {
        [
            line::enter("k0", token, ms(from), ms(asked)),
            line::read("k0", token, ms(from)),
            line::lost("k0", token, ms(told)),
            line::exit("k0", token, ms(told), Op::Ok, Op::Rejected, ms(told), true),
            line::unlock("k0", token, ms(told), Unlock::Lost),
            line::end(ms(3000), 0),
        ]
        .concat()
    };
    let eviction = |start: u64, end: u64, at: u64| Event {
        kind: Kind::Evict,
        start: ms(start),
        end: ms(end),
        worker: None,
        victims: Vec::new(),
        loses: true,
        masters: vec![0],
        evicted: vec![("k0".to_owned(), ms(at))],
    };
    // The older holder's key is evicted at 200 ms (it is told at its first
    // renewal); the newer one enters 2 ms after that is heard, and its own
    // key is evicted at 740 ms.
    let events = [eviction(50, 311, 200), eviction(739, 1500, 740)];
    let limits = limits(IO);
    let verdict = |told: u64| {
        let logs = vec![
            WorkerLog::parse(0, &held(1, 99, 100, 433)),
            WorkerLog::parse(1, &held(2, 150, 202, told)),
        ];
        check(&logs, &events, &limits, false, false)
    };
    // Told at its second renewal, 129 ms after its key was evicted.
    let timely = verdict(869);
    assert_eq!(
        timely.count(rule::LOSS_REPORT),
        0,
        "{:?}",
        timely.violations
    );
    // Told 600 ms after its key was evicted: late.
    let late = verdict(1340);
    assert_eq!(late.count(rule::LOSS_REPORT), 1, "{:?}", late.violations);
}
