//! The linearizability workloads (issue 44): histories of objects written
//! under the lock, checked by a general oracle (`redmutex_testkit::linear`)
//! rather than by rules of our own.
//!
//! Each worker takes the lock [`LOCK`] in a loop (its sections are checked
//! by the suite's rules too) and, in each section, with a value unique to
//! the section:
//! - **register** (`lin:g`, on the lock's server): reads it with a plain
//!   `GET`, holds, then writes the value through `Guard::run_if_held`. A
//!   read, then a write under a lock that excludes, is a compare-and-set
//!   from the value read: the history is checked against a compare-and-set
//!   register, with every worker's plain `GET`s of it at random moments;
//! - **control** (`lin:c`, beside it): the same, written with a plain `SET`
//!   whatever the guard says; a holder paused between its read and its
//!   write writes from a value that is gone, which the checker must find;
//! - **set** (`lin:set` on the resource Redis, a second server no fault
//!   touches): reads the set's size through `fence::admit_and_run` (which
//!   admits the guard's token), holds, then puts its element in that slot
//!   and the size plus one, again through `admit_and_run`. A stale holder's
//!   write that landed would overwrite a newer holder's element: at the
//!   end every acknowledged add must be present, none twice, nothing that
//!   was refused or never added.
//!
//! Every operation is recorded in the worker's record file when invoked
//! (`I`) and when it completes (`C`, with its outcome: `ok`, `fail` when
//! nothing was applied, `info` when unknown). An operation never completed
//! (its worker killed) is unknown; a failed one is left out; a read that
//! failed tells nothing and is left out too. Faults that change the
//! register's server's data are operations of their own, over the fault's
//! window: a `FLUSHALL` or a restart with no data writes nothing, a restart
//! from a snapshot or an AOF loses the value ("havoc").
//!
//! Where they run: the registers need one server that keeps its data
//! (`run_if_held` runs one script on the lock's server): every single-server
//! scenario; not Redlock (no single master holds the truth) nor Sentinel (a
//! failover loses writes the old master acknowledged, and a plain `GET` of
//! the old master reads them: Redis with a replica is not a linearizable
//! register, whatever the lock does). The set runs wherever the lock does,
//! Redlock and Sentinel included. Neither runs with the broken lockers of
//! the negative controls.

mod check;
mod totals;

use std::collections::BTreeMap;

use redmutex_testkit::linear::register;
use redmutex_testkit::linear::{set, Operation};

use crate::history::{Event, Kind};
use crate::{Forks, Scenario, SlowWaiters};
pub use check::{report_run, Checks};
pub use totals::Totals;

/// The environment variable that tells a worker which workloads to run
/// (see [`Workloads::code`]); absent: none.
pub const ENV: &str = "REDMUTEX_CHAOS_LINEAR";
/// The lock every workload's section takes.
pub const LOCK: &str = "lin";
/// The register written through `run_if_held`, and the control's.
pub const GUARDED_KEY: &str = "lin:g";
pub const CONTROL_KEY: &str = "lin:c";
/// The set on the resource Redis: slot -> element, its size, its fence.
pub const SET_KEY: &str = "lin:set";
pub const SIZE_KEY: &str = "lin:size";
pub const FENCE_KEY: &str = "lin:fence";

/// A worker's threads in the histories: the sections' (the writer), and
/// the one that reads the registers at random moments.
pub const WRITER: u64 = 1;
pub const READER: u64 = 2;

/// Process numbers per worker.
pub const THREADS: u64 = 16;

/// The process number of a worker's thread in the histories.
pub fn process(worker: u32, thread: u64) -> u64 {
    u64::from(worker) * THREADS + thread
}

/// Which workloads a scenario's workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workloads {
    None,
    Set,
    /// The registers (guarded and control) and the set.
    All,
}

impl Workloads {
    pub fn of(s: &Scenario) -> Workloads {
        let control = s.flaw.is_some()
            || s.forked_workers == Forks::ChildWithoutWatchdog
            || s.slow_waiters == SlowWaiters::UnboundedStay;
        if control {
            Workloads::None
        } else if s.redlock || s.sentinel.is_some() {
            Workloads::Set
        } else {
            Workloads::All
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Workloads::None => "none",
            Workloads::Set => "set",
            Workloads::All => "all",
        }
    }

    /// This worker's, from [`ENV`].
    pub fn from_env() -> Workloads {
        match std::env::var(ENV).as_deref() {
            Ok("all") => Workloads::All,
            Ok("set") => Workloads::Set,
            _ => Workloads::None,
        }
    }
}

/// The histories a worker records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum History {
    Guarded,
    Control,
    Set,
}

impl History {
    pub fn code(self) -> &'static str {
        match self {
            History::Guarded => "g",
            History::Control => "c",
            History::Set => "s",
        }
    }

    fn parse(s: &str) -> Option<History> {
        match s {
            "g" => Some(History::Guarded),
            "c" => Some(History::Control),
            "s" => Some(History::Set),
            _ => None,
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Nothing was applied (refused, or never sent).
    Fail,
    /// Unknown: applied or not.
    Info,
}

impl Outcome {
    fn code(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Info => "info",
        }
    }
}

/// The record lines: `I <history> <process> <n> <t> <op>` when operation
/// `n` of a process is invoked (op: `r` a read, `c <from> <to>` a
/// compare-and-set, `a <element>` an add), `C <history> <process> <n> <t>
/// <outcome> [<value read>]` when it completes; `-` is no value.
pub mod line {
    use super::{History, Outcome};

    pub fn value(v: Option<u64>) -> String {
        v.map_or("-".to_owned(), |v| v.to_string())
    }

    pub fn invoke(h: History, process: u64, n: u64, t: u64, op: &str) -> String {
        format!("I {} {process} {n} {t} {op}\n", h.code())
    }

    pub fn complete(h: History, process: u64, n: u64, t: u64, o: Outcome) -> String {
        format!("C {} {process} {n} {t} {}\n", h.code(), o.code())
    }

    pub fn read(h: History, process: u64, n: u64, t: u64, v: Option<u64>) -> String {
        format!("C {} {process} {n} {t} ok {}\n", h.code(), value(v))
    }
}

/// One recorded operation, before it is judged.
struct Raw {
    call: u64,
    op: Vec<String>,
    done: Option<(u64, Outcome, Option<Option<u64>>)>,
}

fn number(s: Option<&str>) -> Option<Option<u64>> {
    match s? {
        "-" => Some(None),
        n => n.parse().ok().map(Some),
    }
}

/// The workloads' histories of a run, from every worker's records.
#[derive(Debug, Default)]
pub struct Histories {
    pub guarded: Vec<Operation<register::Op>>,
    pub control: Vec<Operation<register::Op>>,
    pub adds: Vec<(u64, set::Outcome)>,
    /// Writes refused (left out of the register histories).
    pub refused: [usize; 2],
}

impl Histories {
    /// Parses the records of every worker file in `texts`.
    pub fn parse(texts: &[String]) -> Histories {
        let mut raw: BTreeMap<(History, u64, u64), Raw> = BTreeMap::new();
        for text in texts {
            for l in text.lines() {
                let f: Vec<&str> = l.split(' ').collect();
                let (Some(h), Some(Some(p)), Some(Some(n)), Some(Some(t))) = (
                    f.get(1).and_then(|h| History::parse(h)),
                    number(f.get(2).copied()),
                    number(f.get(3).copied()),
                    number(f.get(4).copied()),
                ) else {
                    continue;
                };
                match f.first().copied() {
                    Some("I") => {
                        let op = f.iter().skip(5).map(|s| (*s).to_owned()).collect();
                        raw.insert(
                            (h, p, n),
                            Raw {
                                call: t,
                                op,
                                done: None,
                            },
                        );
                    }
                    Some("C") => {
                        let outcome = match f.get(5).copied() {
                            Some("ok") => Outcome::Ok,
                            Some("fail") => Outcome::Fail,
                            _ => Outcome::Info,
                        };
                        if let Some(r) = raw.get_mut(&(h, p, n)) {
                            r.done = Some((t, outcome, number(f.get(6).copied())));
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut out = Histories::default();
        for ((h, p, _), r) in raw {
            let op: Vec<&str> = r.op.iter().map(String::as_str).collect();
            match (h, op.as_slice()) {
                (History::Set, ["a", e]) => {
                    let Ok(e) = e.parse() else { continue };
                    let o = match r.done.map(|d| d.1) {
                        Some(Outcome::Ok) => set::Outcome::Ok,
                        Some(Outcome::Fail) => set::Outcome::Refused,
                        _ => set::Outcome::Unknown,
                    };
                    out.adds.push((e, o));
                }
                (History::Guarded | History::Control, _) => {
                    let i = usize::from(h == History::Control);
                    let (op, done) = match (op.as_slice(), r.done) {
                        // A read tells something only when it returned.
                        (["r"], Some((t, Outcome::Ok, Some(v)))) => {
                            (register::Op::Read(v), Some(t))
                        }
                        (["c", from, to], done) => {
                            let (Some(from), Ok(to)) = (number(Some(from)), to.parse()) else {
                                continue;
                            };
                            let op = register::Op::Cas { from, to };
                            match done {
                                Some((t, Outcome::Ok, _)) => (op, Some(t)),
                                Some((_, Outcome::Fail, _)) => {
                                    out.refused[i] += 1;
                                    continue;
                                }
                                _ => (op, None),
                            }
                        }
                        _ => continue,
                    };
                    let o = Operation {
                        process: p,
                        call: r.call,
                        ret: done,
                        op,
                    };
                    if i == 0 {
                        out.guarded.push(o);
                    } else {
                        out.control.push(o);
                    }
                }
                _ => {}
            }
        }
        out
    }
}

/// The faults that change the registers' data, as operations over their
/// windows (processes counted down from `u64::MAX`).
pub fn faults_as_operations(events: &[Event]) -> Vec<Operation<register::Op>> {
    events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let op = match e.kind {
                Kind::FlushAll | Kind::RestartEmpty => register::Op::Write(None),
                Kind::RestoreSnapshot | Kind::RestartAof => register::Op::Havoc,
                _ => return None,
            };
            Some(Operation::ok(u64::MAX - i as u64, e.start, e.end, op))
        })
        .collect()
}
