//! The recorded history: what workers write, what the coordinator did, and
//! the checker that reads both.
//!
//! Every worker appends one line per record to its own file, with one
//! `write` each, so a worker killed with `SIGKILL` loses nothing it already
//! recorded. Times are `CLOCK_MONOTONIC` nanoseconds, one clock for every
//! process on the machine.

mod check;
mod explain;
mod faults;
mod rules;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use nix::time::{clock_gettime, ClockId};

pub use check::check;
pub use explain::explain;
pub use faults::{land_starving, Event, Kind};

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

pub const MS: u64 = 1_000_000;

/// The wall clock minus the monotonic clock, in nanoseconds. Redis expires
/// keys by the wall clock and leases count by the monotonic one: a change
/// of this during a run is a clock step that can expire locks early.
pub fn wall_offset_ns() -> i128 {
    let wall = clock_gettime(ClockId::CLOCK_REALTIME).expect("CLOCK_REALTIME");
    let wall = i128::from(wall.tv_sec()) * 1_000_000_000 + i128::from(wall.tv_nsec());
    wall - i128::from(now_ns())
}

/// What one fenced-resource call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Accepted (a read, or a write that landed).
    Ok,
    /// Refused: a larger fencing token had been seen.
    Rejected,
    /// No answer.
    Err,
    /// Not attempted (the read before it failed).
    Skipped,
}

impl Op {
    pub fn code(self) -> &'static str {
        match self {
            Op::Ok => "ok",
            Op::Rejected => "rej",
            Op::Err => "err",
            Op::Skipped => "skip",
        }
    }

    fn parse(s: &str) -> Op {
        match s {
            "ok" => Op::Ok,
            "rej" => Op::Rejected,
            "skip" => Op::Skipped,
            _ => Op::Err,
        }
    }
}

/// What `unlock` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlock {
    Ok,
    /// The lock was no longer ours: the holder is told here at the latest.
    Lost,
    Err,
}

impl Unlock {
    pub fn code(self) -> &'static str {
        match self {
            Unlock::Ok => "ok",
            Unlock::Lost => "lost",
            Unlock::Err => "err",
        }
    }
}

/// The record lines. `E`nter, told `L`ost while holding, e`X`it, `U`nlock,
/// `F`ailed to lock, and `Z`: the worker's clean end.
pub mod line {
    use super::{Op, Unlock};

    /// Entered at `t`, after a lock call that started at `asked`.
    pub fn enter(key: &str, token: u64, t: u64, asked: u64) -> String {
        format!("E {key} {token} {t} {asked}\n")
    }

    /// The section's fenced read was accepted; it returned at `t`.
    pub fn read(key: &str, token: u64, t: u64) -> String {
        format!("G {key} {token} {t}\n")
    }

    pub fn lost(key: &str, token: u64, t: u64) -> String {
        format!("L {key} {token} {t}\n")
    }

    #[allow(clippy::too_many_arguments)]
    pub fn exit(
        key: &str,
        token: u64,
        t: u64,
        get: Op,
        set: Op,
        set_start: u64,
        lost: bool,
    ) -> String {
        let (get, set, lost) = (get.code(), set.code(), u8::from(lost));
        format!("X {key} {token} {t} {get} {set} {set_start} {lost}\n")
    }

    pub fn unlock(key: &str, token: u64, t: u64, u: Unlock) -> String {
        format!("U {key} {token} {t} {}\n", u.code())
    }

    /// A starving round on `key` starts taking every pooled connection.
    pub fn starving(key: &str, token: u64, t: u64) -> String {
        format!("B {key} {token} {t}\n")
    }

    /// The starving round gave back the connections it took (`taken`).
    pub fn starved(key: &str, token: u64, t: u64, taken: usize) -> String {
        format!("S {key} {token} {t} {taken}\n")
    }

    /// A lock call on `key` that started at `asked` failed at `t`.
    pub fn failed(t: u64, kind: &str, key: &str, asked: u64) -> String {
        format!("F {t} {kind} {key} {asked}\n")
    }

    pub fn end(t: u64, running_watchdogs: usize) -> String {
        format!("Z {t} {running_watchdogs}\n")
    }
}

/// A read hold of the read-write lock `<name>` is recorded under
/// `<name>.r`; its write holds under `<name>`.
pub const READ_SUFFIX: &str = ".r";

/// The lock a section's key belongs to: `<name>` for a read hold
/// `<name>.r`, the key itself otherwise.
pub fn lock_of(key: &str) -> &str {
    key.strip_suffix(READ_SUFFIX).unwrap_or(key)
}

/// Whether a lock call on `asked` (as recorded when it failed) wanted the
/// lock recorded as `lock`: the same lock, or one of a semaphore's permits
/// (recorded as `<name>#<permit>`).
fn asked_for(asked: &str, lock: &str) -> bool {
    let asked = lock_of(asked);
    asked == lock
        || lock
            .strip_prefix(asked)
            .is_some_and(|rest| rest.starts_with('#'))
}

#[derive(Debug, Clone)]
pub struct Exit {
    pub t: u64,
    /// The fenced write (the read before it is recorded too, for people).
    pub set: Op,
    /// When the write was sent.
    pub set_start: u64,
    /// `is_lost()` at the end of the critical section.
    pub lost: bool,
}

/// One critical section of one worker, as recorded.
#[derive(Debug, Clone)]
pub struct Section {
    pub worker: u32,
    pub key: String,
    pub token: u64,
    pub enter: u64,
    /// When the lock call that led here started.
    pub asked: u64,
    /// When its first fenced read of the resource returned accepted: from
    /// then on the resource knows its token, and refuses an older one.
    pub read_at: Option<u64>,
    /// A starving round: when it began taking every connection of its
    /// pool (as the worker recorded it)...
    pub starving: Option<u64>,
    /// ...and when it gave them back.
    pub starved: Option<u64>,
    /// When `wait_lost` inside the section returned true.
    pub lost_at: Option<u64>,
    pub exit: Option<Exit>,
    pub unlock: Option<(u64, Unlock)>,
}

impl Section {
    /// When the guard itself (its watchdog, or the lease's deadline) first
    /// told the holder it had lost the lock: `wait_lost` in the section, or
    /// `is_lost` at its end. An `unlock` that returns `Lost` afterwards is
    /// too late to count.
    pub fn told(&self) -> Option<u64> {
        let by_exit = self.exit.as_ref().filter(|x| x.lost).map(|x| x.t);
        [self.lost_at, by_exit].into_iter().flatten().min()
    }

    /// A read hold of a read-write lock: it may overlap other read holds.
    pub fn is_read(&self) -> bool {
        self.key.ends_with(READ_SUFFIX)
    }
}

/// One worker's file, parsed.
#[derive(Debug, Default)]
pub struct WorkerLog {
    pub id: u32,
    pub sections: Vec<Section>,
    /// Lock calls that failed: (key, started, ended).
    pub failed_calls: Vec<(String, u64, u64)>,
    /// Failed lock calls by error kind.
    pub failures: BTreeMap<String, u64>,
    /// Watchdog threads still running at the clean end (None: no clean end).
    pub end: Option<usize>,
}

impl WorkerLog {
    pub fn parse(id: u32, text: &str) -> WorkerLog {
        let mut log = WorkerLog {
            id,
            ..WorkerLog::default()
        };
        let mut open: HashMap<(String, u64), usize> = HashMap::new();
        for l in text.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
            let key = f.get(1).copied().unwrap_or_default().to_owned();
            let find =
                |open: &HashMap<(String, u64), usize>| open.get(&(key.clone(), num(2))).copied();
            match f.first().copied() {
                Some("E") => {
                    open.insert((key.clone(), num(2)), log.sections.len());
                    log.sections.push(Section {
                        worker: id,
                        key,
                        token: num(2),
                        enter: num(3),
                        asked: num(4),
                        read_at: None,
                        starving: None,
                        starved: None,
                        lost_at: None,
                        exit: None,
                        unlock: None,
                    });
                }
                Some("G") => {
                    if let Some(s) = find(&open).and_then(|i| log.sections.get_mut(i)) {
                        s.read_at = Some(num(3));
                    }
                }
                Some("L") => {
                    if let Some(s) = find(&open).and_then(|i| log.sections.get_mut(i)) {
                        s.lost_at = Some(num(3));
                    }
                }
                Some("X") => {
                    if let Some(s) = find(&open).and_then(|i| log.sections.get_mut(i)) {
                        s.exit = Some(Exit {
                            t: num(3),
                            set: Op::parse(f.get(5).copied().unwrap_or_default()),
                            set_start: num(6),
                            lost: f.get(7) == Some(&"1"),
                        });
                    }
                }
                Some("U") => {
                    if let Some(s) = find(&open).and_then(|i| log.sections.get_mut(i)) {
                        let u = match f.get(4).copied() {
                            Some("ok") => Unlock::Ok,
                            Some("lost") => Unlock::Lost,
                            _ => Unlock::Err,
                        };
                        s.unlock = Some((num(3), u));
                    }
                }
                Some("B") => {
                    if let Some(s) = find(&open).and_then(|i| log.sections.get_mut(i)) {
                        s.starving = Some(num(3));
                    }
                }
                Some("S") => {
                    if let Some(s) = find(&open).and_then(|i| log.sections.get_mut(i)) {
                        s.starved = Some(num(3));
                    }
                }
                Some("F") => {
                    let kind = f.get(2).copied().unwrap_or("?").to_owned();
                    *log.failures.entry(kind).or_default() += 1;
                    let key = f.get(3).copied().unwrap_or_default().to_owned();
                    log.failed_calls.push((key, num(4), num(1)));
                }
                Some("Z") => log.end = Some(usize::try_from(num(2)).unwrap_or(usize::MAX)),
                _ => {}
            }
        }
        log
    }
}

/// The bounds the checker holds the run to, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub ttl: u64,
    /// How often a watchdog renews.
    pub renew: u64,
    /// One operation's time bound (checkout or I/O).
    pub op: u64,
    /// The longest backoff delay.
    pub backoff: u64,
    /// Scheduling allowance for a loaded machine (not for loss reports).
    pub slack: u64,
    /// Whether every lease must be kept where no fault is around (forked
    /// workers: their watchdogs run).
    pub kept_leases: bool,
}

impl Limits {
    /// A holder whose lock was taken is told by its next renewal.
    pub fn loss_report(&self) -> u64 {
        self.renew + self.op
    }

    /// ... or, when a fault kept its renewals from getting through, by its
    /// lease's deadline.
    pub fn loss_report_blocked(&self) -> u64 {
        self.ttl + self.op
    }

    pub fn takeover(&self) -> u64 {
        self.ttl + self.backoff + self.op + self.slack
    }

    /// From a release to the next holder, when someone was waiting.
    pub fn handover(&self) -> u64 {
        self.backoff + self.op + self.slack
    }
}

/// One broken rule.
#[derive(Debug, Clone)]
pub struct Violation {
    pub rule: &'static str,
    pub text: String,
    /// When it happened, where one moment says it (an overlap: the newer
    /// holder's entry): the report prints the faults and the records
    /// around it (see [`explain`]).
    pub at: Option<u64>,
    /// The lock it is about, and the (worker, token) of the sections in it.
    pub lock: Option<String>,
    pub involved: Vec<(u32, u64)>,
}

impl Violation {
    /// A violation of the run as a whole (no moment, no section).
    pub fn new(rule: &'static str, text: String) -> Violation {
        Violation {
            rule,
            text,
            at: None,
            lock: None,
            involved: Vec::new(),
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.rule, self.text)
    }
}

/// The rules, by the name a violation carries.
pub mod rule {
    pub const EXCLUSION: &str = "exclusion";
    pub const STALE_WRITE: &str = "stale-write";
    pub const FENCING: &str = "fencing";
    pub const LOSS_REPORT: &str = "loss-report";
    pub const TAKEOVER: &str = "takeover";
    pub const HANDOVER: &str = "handover";
    pub const RELEASE_ERROR: &str = "release-error";
    pub const LOST_UPDATE: &str = "lost-update";
    pub const LEFTOVERS: &str = "leftovers";
    pub const CLEAN_END: &str = "clean-end";
    pub const STARVED: &str = "starved-lease";
    pub const KEPT: &str = "kept-lease";
    /// The register written through `Guard::run_if_held`: its history is
    /// linearizable (see `linear.rs`).
    pub const LINEARIZABLE: &str = "linearizable";
    /// The set written through `fence::admit_and_run`: every acknowledged
    /// add present, none twice, nothing refused or never added.
    pub const FENCED_SET: &str = "fenced-set";
}

/// What the checker found in one run.
#[derive(Debug, Default)]
pub struct Verdict {
    pub acquisitions: u64,
    pub violations: Vec<Violation>,
    /// Overlaps allowed, by why: the older holder was cut off or paused, or
    /// its lock was taken behind its back, and it was told and fenced off.
    pub excused: BTreeMap<String, u64>,
    /// Overlaps whose older holder had been told before the newer entered.
    pub known_before: u64,
    pub notes: Vec<String>,
    /// Sections whose holder was told it lost the lock.
    pub told: u64,
    /// By fault kind: the longest time from its end until every key was
    /// held again.
    pub recovery: BTreeMap<Kind, u64>,
    pub stale_accepted: u64,
    /// By fault kind (kill of a holder or of a waiter): the longest time
    /// until the lock was held again.
    pub takeover: BTreeMap<Kind, u64>,
    /// By fault kind: the longest time from a tamper to its victim's report.
    pub loss_report: BTreeMap<Kind, u64>,
    pub losses_reported: u64,
    /// Victims told by their lease's deadline because a fault blocked the
    /// renewal that would have told them.
    pub told_by_deadline: u64,
    /// Starving rounds that did take the pool's connections.
    pub starved_landed: u64,
}

impl Verdict {
    pub fn violate(&mut self, rule: &'static str, text: String) {
        self.violations.push(Violation::new(rule, text));
    }

    /// A violation at `at` on `lock`, by the sections `involved`.
    pub fn violate_at(
        &mut self,
        rule: &'static str,
        text: String,
        at: u64,
        lock: &str,
        involved: &[&Section],
    ) {
        self.violations.push(Violation {
            rule,
            text,
            at: Some(at),
            lock: Some(lock_of(lock).to_owned()),
            involved: involved.iter().map(|s| (s.worker, s.token)).collect(),
        });
    }

    pub fn count(&self, rule: &str) -> usize {
        self.violations.iter().filter(|v| v.rule == rule).count()
    }

    pub fn excused_total(&self) -> u64 {
        self.excused.values().sum()
    }
}

/// Every recorded lock call, as (lock, when it started, when it ended: its
/// entry or its failure).
pub fn lock_calls(logs: &[WorkerLog]) -> Vec<(&str, u64, u64)> {
    logs.iter()
        .flat_map(|l| {
            l.sections
                .iter()
                .map(|s| (lock_of(&s.key), s.asked, s.enter))
                .chain(l.failed_calls.iter().map(|(k, a, e)| (lock_of(k), *a, *e)))
        })
        .filter(|(_, asked, _)| *asked > 0)
        .collect()
}

pub fn ms(ns: u64) -> f64 {
    ns as f64 / MS as f64
}

/// A short text of a verdict's figures.
pub fn summary(v: &Verdict) -> String {
    let mut s = format!(
        "{} acquisitions, {} violations, {} told lost, {} overlaps excused, {} stale writes accepted",
        v.acquisitions,
        v.violations.len(),
        v.told,
        v.excused_total(),
        v.stale_accepted
    );
    let worst = v.recovery.values().max();
    if let Some(r) = worst {
        let _ = write!(s, ", all keys held again {:.0} ms after", ms(*r));
    }
    if let Some(t) = v.takeover.values().max() {
        let _ = write!(s, ", takeover max {:.0} ms", ms(*t));
    }
    if let Some(t) = v.loss_report.values().max() {
        let _ = write!(
            s,
            ", loss told max {:.0} ms after ({} told)",
            ms(*t),
            v.losses_reported
        );
    }
    s
}
