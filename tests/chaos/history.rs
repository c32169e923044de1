//! The recorded history: what workers write, what the coordinator did, and
//! the checker that reads both.
//!
//! Every worker appends one line per record to its own file, with one
//! `write` each, so a worker killed with `SIGKILL` loses nothing it already
//! recorded. Times are `CLOCK_MONOTONIC` nanoseconds, one clock for every
//! process on the machine.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use nix::time::{clock_gettime, ClockId};

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

pub const MS: u64 = 1_000_000;

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

    pub fn enter(key: &str, token: u64, t: u64) -> String {
        format!("E {key} {token} {t}\n")
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

    /// The section holds this many of its pool's connections.
    pub fn starved(key: &str, token: u64, t: u64, taken: usize) -> String {
        format!("S {key} {token} {t} {taken}\n")
    }

    pub fn failed(t: u64, kind: &str) -> String {
        format!("F {t} {kind}\n")
    }

    pub fn end(t: u64, running_watchdogs: usize) -> String {
        format!("Z {t} {running_watchdogs}\n")
    }
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
    /// When `wait_lost` inside the section returned true.
    pub lost_at: Option<u64>,
    pub exit: Option<Exit>,
    pub unlock: Option<(u64, Unlock)>,
}

impl Section {
    /// When the holder was first told it had lost the lock.
    pub fn told(&self) -> Option<u64> {
        let by_exit = self.exit.as_ref().filter(|x| x.lost).map(|x| x.t);
        let by_unlock = self
            .unlock
            .filter(|(_, u)| *u == Unlock::Lost)
            .map(|(t, _)| t);
        [self.lost_at, by_exit, by_unlock]
            .into_iter()
            .flatten()
            .min()
    }
}

/// One worker's file, parsed.
#[derive(Debug, Default)]
pub struct WorkerLog {
    pub id: u32,
    pub sections: Vec<Section>,
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
                        lost_at: None,
                        exit: None,
                        unlock: None,
                    });
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
                Some("F") => {
                    let kind = f.get(2).copied().unwrap_or("?").to_owned();
                    *log.failures.entry(kind).or_default() += 1;
                }
                Some("Z") => log.end = Some(usize::try_from(num(2)).unwrap_or(usize::MAX)),
                _ => {}
            }
        }
        log
    }
}

/// The faults the coordinator injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    KillHolder,
    PauseHolder,
    PauseServer,
    Del,
    ForeignSet,
    Pexpire,
    FlushAll,
    ScriptFlush,
    ClientKill,
    ProxyDelay,
    ProxyBlackhole,
    ProxyDropReplies,
    StarvePool,
}

impl Kind {
    pub const ALL: [Kind; 13] = [
        Kind::KillHolder,
        Kind::PauseHolder,
        Kind::PauseServer,
        Kind::Del,
        Kind::ForeignSet,
        Kind::Pexpire,
        Kind::FlushAll,
        Kind::ScriptFlush,
        Kind::ClientKill,
        Kind::ProxyDelay,
        Kind::ProxyBlackhole,
        Kind::ProxyDropReplies,
        Kind::StarvePool,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::KillHolder => "kill -9 of a holder",
            Kind::PauseHolder => "SIGSTOP of a holder past its TTL",
            Kind::PauseServer => "SIGSTOP of the Redis server",
            Kind::Del => "DEL of a held key",
            Kind::ForeignSet => "foreign SET of a held key",
            Kind::Pexpire => "PEXPIRE 1 of a held key",
            Kind::FlushAll => "FLUSHALL",
            Kind::ScriptFlush => "SCRIPT FLUSH",
            Kind::ClientKill => "CLIENT KILL of every client",
            Kind::ProxyDelay => "proxy: replies and requests delayed",
            Kind::ProxyBlackhole => "proxy: blackhole past the TTL",
            Kind::ProxyDropReplies => "proxy: replies dropped",
            Kind::StarvePool => "application holds every pooled connection",
        }
    }

    /// Takes the lock away from its holder behind the library's back.
    pub fn is_tamper(self) -> bool {
        matches!(
            self,
            Kind::Del | Kind::ForeignSet | Kind::Pexpire | Kind::FlushAll
        )
    }
}

/// One injected fault.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: Kind,
    pub start: u64,
    pub end: u64,
    /// The worker it hit (kill, pause, starvation).
    pub worker: Option<u32>,
    /// The (lock key, fencing token) of the locks a tamper took away.
    pub victims: Vec<(String, u64)>,
    /// Whether the victims must be told they lost the lock (a tamper on one
    /// Redlock master takes nothing away).
    pub loses: bool,
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
    /// Scheduling allowance for a loaded machine.
    pub slack: u64,
}

impl Limits {
    pub fn loss_report(&self) -> u64 {
        self.renew + self.op + self.slack
    }

    pub fn takeover(&self) -> u64 {
        self.ttl + self.backoff + self.op + self.slack
    }
}

/// What the checker found in one run.
#[derive(Debug, Default)]
pub struct Verdict {
    pub acquisitions: u64,
    pub violations: Vec<String>,
    /// Overlaps allowed because the earlier holder was told and fenced off.
    pub excused_overlaps: u64,
    pub notes: Vec<String>,
    /// Sections whose holder was told it lost the lock.
    pub told: u64,
    /// By fault kind: the longest time from its end until every key was
    /// held again.
    pub recovery: BTreeMap<Kind, u64>,
    pub stale_accepted: u64,
    pub max_takeover: Option<u64>,
    pub max_loss_report: Option<u64>,
    pub losses_reported: u64,
}

/// Checks the merged history against the rules in the issue: no overlap
/// that the holder was not told about and fenced off, rising fencing tokens,
/// every loss reported in time, takeover in time after a kill, and a clean
/// end with no watchdog left running.
pub fn check(logs: &[WorkerLog], events: &[Event], limits: &Limits) -> Verdict {
    let mut v = Verdict::default();
    let killed: HashMap<u32, u64> = events
        .iter()
        .filter(|e| e.kind == Kind::KillHolder)
        .filter_map(|e| e.worker.map(|w| (w, e.start)))
        .collect();
    let mut by_key: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    for log in logs {
        for s in &log.sections {
            by_key.entry(&s.key).or_default().push(s);
        }
        v.acquisitions += log.sections.len() as u64;
        match log.end {
            Some(0) => {}
            Some(n) => v.violations.push(format!(
                "worker {}: {n} watchdog threads still running at its end",
                log.id
            )),
            None if killed.contains_key(&log.id) => {}
            None => v
                .violations
                .push(format!("worker {} never reached its clean end", log.id)),
        }
    }
    let end_of = |s: &Section| -> u64 {
        s.exit
            .as_ref()
            .map(|x| x.t)
            .or_else(|| killed.get(&s.worker).copied())
            .unwrap_or(u64::MAX)
    };
    // A pause that ended less than a TTL before a section's recorded entry
    // may have hit it between `lock` returning and the record.
    let paused = |s: &Section, until: u64| {
        events.iter().any(|e| {
            e.kind == Kind::PauseHolder
                && e.worker == Some(s.worker)
                && e.start < until.max(s.enter)
                && e.end + limits.ttl > s.enter
        })
    };
    let tampered = |s: &Section, until: u64| {
        events.iter().any(|e| {
            e.kind.is_tamper()
                && e.start <= until
                && e.victims.iter().any(|(k, t)| *k == s.key && *t == s.token)
        })
    };
    // A holder whose lock was taken away and whose section ended before a
    // renewal could tell it, with an unlock that failed (another fault), was
    // never told: nothing could have told it in time.
    let untellable = |s: &Section| {
        events.iter().any(|e| {
            e.kind.is_tamper()
                && e.victims.iter().any(|(k, t)| *k == s.key && *t == s.token)
                && s.exit
                    .as_ref()
                    .is_some_and(|x| x.t <= e.start + limits.loss_report())
                && s.unlock.is_none_or(|(_, u)| u == Unlock::Err)
        })
    };

    let mut excused = std::collections::HashSet::new();
    for sections in by_key.values_mut() {
        sections.sort_by_key(|s| s.enter);
        let mut seen = HashMap::new();
        for s in sections.iter() {
            if let Some(w) = seen.insert(s.token, s.worker) {
                v.violations.push(format!(
                    "{}: fencing token {} handed out twice (workers {w} and {})",
                    s.key, s.token, s.worker
                ));
            }
        }
        for (i, a) in sections.iter().enumerate() {
            let end = end_of(a);
            if end == u64::MAX {
                v.violations.push(format!(
                    "{} token {}: worker {} entered and never left",
                    a.key, a.token, a.worker
                ));
            }
            let mut overlapped = false;
            for b in sections.iter().skip(i + 1).take_while(|b| b.enter < end) {
                overlapped = true;
                // The holder with the older token is the one that should
                // have stopped (it may have recorded its entry late, when a
                // pause hit it between `lock` returning and the record).
                let (old, new) = if a.token < b.token { (a, b) } else { (b, a) };
                let since = a.enter.max(b.enter);
                match judge(old, since, &paused, &tampered, &untellable) {
                    Judged::Excused => {
                        excused.insert((old.worker, old.token));
                        v.notes.push(format!(
                            "{}: w{} token {} (enter {}, told {:?}, exit {:?}) / w{} token {} (enter {})",
                            a.key, old.worker, old.token, old.enter, old.told(), old.exit.as_ref().map(|x| x.t), new.worker, new.token, new.enter
                        ));
                    }
                    Judged::StaleWrite => {
                        v.stale_accepted += 1;
                        v.violations.push(format!(
                            "{}: a stale write of token {} (worker {}) was accepted after token {} entered",
                            a.key, old.token, old.worker, new.token
                        ));
                    }
                    Judged::Violation => v.violations.push(format!(
                        "{}: worker {} (token {}) and worker {} (token {}) held the lock together \
                         for {:.1} ms, and the first was not told it had lost it",
                        a.key,
                        old.worker,
                        old.token,
                        new.worker,
                        new.token,
                        ms(end.min(end_of(b)).min(now_ns()).saturating_sub(b.enter))
                    )),
                }
            }
            // Tokens rise in the order the lock was held, but for a stale
            // holder that recorded its entry late (it was told, and fenced off).
            if let Some(b) = sections.get(i + 1) {
                if !overlapped && b.token <= a.token {
                    match judge(b, b.enter, &paused, &tampered, &untellable) {
                        Judged::Excused => {
                            excused.insert((b.worker, b.token));
                        }
                        _ => v.violations.push(format!(
                            "{}: fencing token went from {} to {} between holders",
                            a.key, a.token, b.token
                        )),
                    }
                }
            }
        }
    }

    v.excused_overlaps = excused.len() as u64;
    v.told = by_key
        .values()
        .flatten()
        .filter(|s| s.told().is_some())
        .count() as u64;

    // How long after each fault ended every key was held again.
    for e in events.iter().filter(|e| e.kind != Kind::KillHolder) {
        let back = by_key
            .values()
            .filter_map(|ss| ss.iter().find(|s| s.enter > e.end).map(|s| s.enter - e.end))
            .max();
        let r = v.recovery.entry(e.kind).or_default();
        *r = (*r).max(back.unwrap_or(0));
    }

    // Every holder whose lock was taken away is told, in time.
    for e in events.iter().filter(|e| e.kind.is_tamper() && e.loses) {
        for (key, token) in &e.victims {
            let Some(s) = by_key
                .get(key.as_str())
                .and_then(|ss| ss.iter().find(|s| s.token == *token))
            else {
                continue; // taken from a holder that had not recorded yet
            };
            if killed.get(&s.worker).is_some_and(|&k| k > s.enter) && s.told().is_none() {
                continue; // killed (before or after the tamper) before it was told
            }
            // Another fault in the way (a frozen server or holder, a cut
            // link) delays the renewal that would tell: the lease deadline
            // tells instead, and the bound does not apply.
            let hindered = events.iter().any(|o| {
                !o.kind.is_tamper()
                    && !matches!(o.kind, Kind::ScriptFlush | Kind::KillHolder)
                    && o.start < e.start + limits.loss_report()
                    && o.end + limits.ttl > e.start
            });
            match s.told() {
                Some(_) if hindered => v.losses_reported += 1,
                None if untellable(s) || hindered => {}
                Some(t) => {
                    let late = t.saturating_sub(e.start);
                    v.losses_reported += 1;
                    v.max_loss_report = v.max_loss_report.max(Some(late));
                    if late > limits.loss_report() {
                        v.violations.push(format!(
                            "{key} token {token}: told of the loss ({}) {:.1} ms after it, bound {:.1} ms",
                            e.kind.name(),
                            ms(late),
                            ms(limits.loss_report())
                        ));
                    }
                }
                // PEXPIRE 1 leaves the key a millisecond: an unlock in it is fine.
                None if e.kind == Kind::Pexpire
                    && s.unlock
                        .is_some_and(|(t, u)| u == Unlock::Ok && t <= e.start + 5 * MS) => {}
                None => v.violations.push(format!(
                    "{key} token {token} (worker {}): never told of the loss ({})",
                    s.worker,
                    e.kind.name()
                )),
            }
        }
    }

    // After a holder's death, another takes over within TTL + one backoff.
    for e in events.iter().filter(|e| e.kind == Kind::KillHolder) {
        let Some(w) = e.worker else { continue };
        let quiet = !events.iter().any(|o| {
            o.kind != Kind::KillHolder
                && o.start < e.start + limits.takeover()
                && o.end + limits.ttl > e.start
        });
        let held = by_key
            .values()
            .flatten()
            .filter(|s| s.worker == w && s.enter < e.start && s.unlock.is_none());
        for s in held {
            let next = by_key.get(s.key.as_str()).and_then(|ss| {
                ss.iter()
                    .filter(|n| n.enter > e.start)
                    .map(|n| n.enter)
                    .min()
            });
            match next {
                Some(n) => {
                    let took = n - e.start;
                    if quiet {
                        v.max_takeover = v.max_takeover.max(Some(took));
                        if took > limits.takeover() {
                            v.violations.push(format!(
                                "{}: taken over {:.1} ms after its holder was killed, bound {:.1} ms",
                                s.key,
                                ms(took),
                                ms(limits.takeover())
                            ));
                        }
                    }
                }
                None => v.violations.push(format!(
                    "{}: nobody took the lock over after its holder was killed",
                    s.key
                )),
            }
        }
    }
    v
}

enum Judged {
    Excused,
    StaleWrite,
    Violation,
}

/// Whether `old`, still in its critical section at `since` while a newer
/// token held the lock, was allowed to be: only if it was told it lost the
/// lock (before `since`, or after a pause or a tamper that explains the
/// delay), and no write of its sent after `since` was accepted.
fn judge(
    old: &Section,
    since: u64,
    paused: &dyn Fn(&Section, u64) -> bool,
    tampered: &dyn Fn(&Section, u64) -> bool,
    untellable: &dyn Fn(&Section) -> bool,
) -> Judged {
    let told = match old.told() {
        Some(t) => t <= since || paused(old, since) || tampered(old, since),
        None => tampered(old, since) && untellable(old),
    };
    let wrote = old
        .exit
        .as_ref()
        .is_some_and(|x| x.set == Op::Ok && x.set_start > since);
    match (told, wrote) {
        (true, false) => Judged::Excused,
        (true, true) => Judged::StaleWrite,
        (false, _) => Judged::Violation,
    }
}

pub fn ms(ns: u64) -> f64 {
    ns as f64 / MS as f64
}

/// A short text of a verdict's figures.
pub fn summary(v: &Verdict) -> String {
    let mut s = format!(
        "{} acquisitions, {} violations, {} told lost, {} stale holders fenced off, {} stale writes accepted",
        v.acquisitions,
        v.violations.len(),
        v.told,
        v.excused_overlaps,
        v.stale_accepted
    );
    let worst = v.recovery.values().max();
    if let Some(r) = worst {
        let _ = write!(s, ", all keys held again {:.0} ms after", ms(*r));
    }
    if let Some(t) = v.max_takeover {
        let _ = write!(s, ", takeover max {:.0} ms", ms(t));
    }
    if let Some(t) = v.max_loss_report {
        let _ = write!(
            s,
            ", loss told max {:.0} ms after ({} told)",
            ms(t),
            v.losses_reported
        );
    }
    s
}
