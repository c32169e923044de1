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

/// The faults the coordinator injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    KillHolder,
    KillWaiter,
    PauseHolder,
    PartitionHolder,
    CutHolderReplies,
    HalfOpenHolder,
    PauseServer,
    Del,
    ForeignSet,
    Pexpire,
    FlushAll,
    RestoreSnapshot,
    RestartAof,
    RestartEmpty,
    ScriptFlush,
    ClientKill,
    ProxyDelay,
    ProxyBlackhole,
    ProxyDropReplies,
    StarvePool,
    /// A holder that holds every pooled connection (a starving round) has
    /// its replies cut past its TTL: it must be told by its lease while its
    /// application still holds the connections.
    StarveCut,
    /// `maxmemory` with `volatile-ttl`, filled until writes fail: every
    /// key with a TTL (every lock) is evicted, then writes fail with OOM
    /// for a while.
    Evict,
    /// Sentinel: the replica promoted (`SENTINEL FAILOVER`) while a lock
    /// is held; the old master becomes its replica.
    Failover,
    /// Redlock: the data of two masters lost, at different times.
    FlushTwo,
    /// Redlock: two masters killed at once, restarted empty later.
    KillTwo,
    /// Redlock: one master's replies delayed, so its clock seems late.
    SkewMaster,
    /// Redlock: every master killed at once, restarted empty 1.5 TTL later
    /// (no sooner than the TTL, as the crate docs ask).
    KillAll,
    /// Redlock: one master frozen (`SIGSTOP`) for a moment, long enough
    /// for the releases sent meanwhile to time out there.
    HangMaster,
    /// An operator's `Locker::break_lock` of a hold picked at random from
    /// `Locker::locks` (a lock, a permit, a read or the write hold): its
    /// holder must be told within a renewal, and is fenced off.
    Break,
    /// Cluster: a master failed over to its replica (`CLUSTER FAILOVER`, a
    /// coordinated failover: no write is lost).
    ClusterFailover,
    /// Cluster: a master killed (`SIGKILL`), its replica promoted by the
    /// cluster, the killed node restarted (it rejoins as a replica): writes
    /// not yet replicated are lost, as with Sentinel without `min_replicas`.
    ClusterKill,
    /// Cluster: the slot of a lock moved to another master (`SETSLOT
    /// MIGRATING/IMPORTING`, `MIGRATE`, `SETSLOT NODE`) under its waiters.
    SlotMigrate,
}

impl Kind {
    /// The faults of a single-server scenario.
    pub const ONE_SERVER: [Kind; 22] = [
        Kind::KillHolder,
        Kind::KillWaiter,
        Kind::PauseHolder,
        Kind::PartitionHolder,
        Kind::CutHolderReplies,
        Kind::HalfOpenHolder,
        Kind::PauseServer,
        Kind::Del,
        Kind::ForeignSet,
        Kind::Pexpire,
        Kind::FlushAll,
        Kind::RestoreSnapshot,
        Kind::RestartAof,
        Kind::RestartEmpty,
        Kind::ScriptFlush,
        Kind::ClientKill,
        Kind::ProxyDelay,
        Kind::ProxyBlackhole,
        Kind::ProxyDropReplies,
        Kind::StarvePool,
        Kind::StarveCut,
        Kind::Evict,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::KillHolder => "kill -9 of a holder",
            Kind::KillWaiter => "kill -9 of a queued waiter",
            Kind::PauseHolder => "SIGSTOP of a holder past its TTL",
            Kind::PartitionHolder => "one holder cut off both ways past its TTL",
            Kind::CutHolderReplies => "one holder's replies cut past its TTL",
            Kind::HalfOpenHolder => "one holder's connections half-open",
            Kind::PauseServer => "SIGSTOP of the Redis server",
            Kind::Del => "DEL of a held key",
            Kind::ForeignSet => "foreign SET of a held key",
            Kind::Pexpire => "PEXPIRE 1 of a held key",
            Kind::FlushAll => "FLUSHALL",
            Kind::RestoreSnapshot => "restart from an older RDB snapshot",
            Kind::RestartAof => "restart from an AOF (everysec)",
            Kind::RestartEmpty => "restart with no persistence",
            Kind::ScriptFlush => "SCRIPT FLUSH",
            Kind::ClientKill => "CLIENT KILL of every client",
            Kind::ProxyDelay => "proxy: replies and requests delayed",
            Kind::ProxyBlackhole => "proxy: blackhole past the TTL",
            Kind::ProxyDropReplies => "proxy: replies dropped",
            Kind::StarvePool => "application holds every pooled connection",
            Kind::StarveCut => "a starving holder's replies cut past its TTL",
            Kind::Evict => "maxmemory volatile-ttl: locks evicted, then OOM",
            Kind::Failover => "Sentinel: failover while holding",
            Kind::FlushTwo => "Redlock: two masters flushed apart",
            Kind::KillTwo => "Redlock: two masters killed at once",
            Kind::SkewMaster => "Redlock: one master's replies late",
            Kind::KillAll => "Redlock: every master killed, restarted empty",
            Kind::HangMaster => "Redlock: one master hung across unlocks",
            Kind::Break => "an operator's break of a hold picked at random",
            Kind::ClusterFailover => "Cluster: a master failed over (CLUSTER FAILOVER)",
            Kind::ClusterKill => "Cluster: a master killed, its replica promoted",
            Kind::SlotMigrate => "Cluster: a lock's slot migrated under waiters",
        }
    }

    /// Takes locks away behind the library's back; the victims are known.
    pub fn is_tamper(self) -> bool {
        matches!(
            self,
            Kind::Del
                | Kind::ForeignSet
                | Kind::Pexpire
                | Kind::Break
                | Kind::FlushAll
                | Kind::Evict
                | Kind::RestoreSnapshot
                | Kind::RestartAof
                | Kind::RestartEmpty
                | Kind::FlushTwo
                | Kind::KillTwo
                | Kind::KillAll
        )
    }

    /// Cuts one worker (`Event::worker`) off from the server, or freezes it:
    /// the only faults that excuse that worker's overlap.
    pub fn cuts_off_worker(self) -> bool {
        matches!(
            self,
            Kind::PauseHolder
                | Kind::PartitionHolder
                | Kind::CutHolderReplies
                | Kind::HalfOpenHolder
                | Kind::StarvePool
                | Kind::StarveCut
        )
    }

    /// Freezes one worker's process (`Event::worker`): the only fault that
    /// excuses a holder told of its loss after a rival entered (it could
    /// not run to hear it). A holder cut off from the server still runs,
    /// and its lease's deadline comes before the key expires.
    pub fn freezes_worker(self) -> bool {
        self == Kind::PauseHolder
    }

    /// Keeps every worker's renewals from getting through for a while, so
    /// that a loss is told by the lease's deadline, not by a renewal.
    pub fn blocks_renewals(self) -> bool {
        matches!(
            self,
            Kind::PauseServer
                | Kind::ProxyBlackhole
                | Kind::ProxyDropReplies
                | Kind::ProxyDelay
                | Kind::ClientKill
                | Kind::RestoreSnapshot
                | Kind::RestartAof
                | Kind::RestartEmpty
                | Kind::KillTwo
                | Kind::KillAll
                | Kind::ClusterFailover
                | Kind::ClusterKill
                | Kind::SlotMigrate
        )
    }
}

/// One injected fault.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: Kind,
    pub start: u64,
    pub end: u64,
    /// The worker it hit (kill, pause, cut-off, starvation).
    pub worker: Option<u32>,
    /// The (lock key, fencing token) of the locks it took away.
    /// Each as (lock key, fencing token, worker): on Redlock a fresh grant's
    /// instances hold different tokens until the largest is written back,
    /// so a victim is also known by its worker.
    pub victims: Vec<(String, u64, Option<u32>)>,
    /// Whether the victims must be told they lost the lock (a tamper on one
    /// Redlock master takes nothing away).
    pub loses: bool,
    /// Redlock: the masters it hit.
    pub masters: Vec<usize>,
    /// Lock keys evicted, each with when the eviction was heard of: the
    /// victim is whoever held that key then.
    pub evicted: Vec<(String, u64)>,
}

/// Puts each starving round where its worker recorded it: an event of
/// that kind gets the window of the first round its worker began after it
/// was told to starve; one whose round never began did not land, and goes.
pub fn land_starving(events: &mut Vec<Event>, logs: &[WorkerLog]) {
    events.retain_mut(|e| {
        if e.kind != Kind::StarvePool {
            return true;
        }
        let round = logs
            .iter()
            .filter(|l| Some(l.id) == e.worker)
            .flat_map(|l| &l.sections)
            .filter_map(|s| Some((s.starving?, s.starved?)))
            .filter(|(began, _)| *began >= e.start)
            .min();
        match round {
            Some((began, ended)) => {
                (e.start, e.end) = (began, ended);
                true
            }
            None => false,
        }
    });
}

/// How late an eviction may be heard of after it happened (a keyspace
/// notification on a loaded machine), so that a section that entered
/// just before it is still its victim.
const EVICTION_HEARD: u64 = 20 * MS;

impl Event {
    /// Whether `s` held the lock on `key` that was evicted at `t`.
    /// One whose `unlock` found the key still its own was not (the
    /// eviction heard took the holder's before it).
    fn evicted_from(s: &Section, key: &str, t: u64, end: u64) -> bool {
        s.key == key
            && s.unlock.is_none_or(|(_, u)| u != Unlock::Ok)
            && s.asked <= t
            && s.enter <= t + EVICTION_HEARD
            && end >= t.saturating_sub(EVICTION_HEARD)
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

/// Checks the merged history: no overlap but of a holder that was cut off,
/// paused or robbed and was told and fenced off; fencing tokens unique and
/// rising; every robbed holder told in time; takeover in time after a kill;
/// a waiting caller served promptly after a release; a clean end with no
/// watchdog left running. (Lost updates and leftovers are checked by the
/// coordinator, which reads Redis.)
/// `lossy_failover`: Sentinel without `min_replicas`, where a failover may
/// hand a lock to a second holder (the documented limit of asynchronous
/// replication): such overlaps are counted apart, as long as no stale write
/// is accepted. The older holder may not be told in time: until the old
/// master is demoted, it goes on confirming its renewals.
pub fn check(
    logs: &[WorkerLog],
    events: &[Event],
    limits: &Limits,
    redlock: bool,
    lossy_failover: bool,
) -> Verdict {
    let mut v = Verdict::default();
    let killed: HashMap<u32, u64> = events
        .iter()
        .filter(|e| matches!(e.kind, Kind::KillHolder | Kind::KillWaiter))
        .filter_map(|e| e.worker.map(|w| (w, e.start)))
        .collect();
    let mut by_key: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    let mut rounds = Vec::new();
    for log in logs {
        for s in &log.sections {
            by_key.entry(lock_of(&s.key)).or_default().push(s);
            // A round holds several keys: counted once.
            if s.starved.is_some() && !rounds.contains(&(s.worker, s.starved)) {
                rounds.push((s.worker, s.starved));
                v.starved_landed += 1;
            }
        }
        v.acquisitions += log.sections.len() as u64;
        match log.end {
            Some(0) => {}
            Some(n) => v.violate(
                rule::CLEAN_END,
                format!(
                    "worker {}: {n} watchdog threads still running at its end",
                    log.id
                ),
            ),
            None if killed.contains_key(&log.id) => {}
            None => v.violate(
                rule::CLEAN_END,
                format!("worker {} never reached its clean end", log.id),
            ),
        }
    }
    for sections in by_key.values_mut() {
        sections.sort_by_key(|s| s.enter);
    }
    let end_of = |s: &Section| -> u64 {
        s.exit
            .as_ref()
            .map(|x| x.t)
            .or_else(|| killed.get(&s.worker).copied())
            .unwrap_or(u64::MAX)
    };
    // The fault that cut `s`'s worker off (or froze it) while it held the
    // lock (a pause that ended less than a TTL before its recorded entry
    // may have hit it between `lock` returning and the record).
    let hit = |s: &Section, until: u64, how: fn(Kind) -> bool| -> Option<Kind> {
        events
            .iter()
            .find(|e| {
                how(e.kind)
                    && e.worker == Some(s.worker)
                    && e.start < until.max(s.enter)
                    && e.end + limits.ttl > s.enter
            })
            .map(|e| e.kind)
    };
    let cut_off = |s: &Section, until: u64| hit(s, until, Kind::cuts_off_worker);
    let frozen = |s: &Section, until: u64| hit(s, until, Kind::freezes_worker);
    // The tamper that took `s`'s lock away before `until`. On Redlock only a
    // fault that hit a majority of masters takes a lock away.
    // Whether `s` held one of the locks `e` took away.
    let victim = |e: &Event, s: &Section| {
        e.victims.iter().any(|(k, t, w)| {
            *k == s.key
                && (*t == s.token
                    || (*w == Some(s.worker) && s.asked <= e.start && end_of(s) >= e.start))
        }) || e
            .evicted
            .iter()
            .any(|(k, t)| Event::evicted_from(s, k, *t, end_of(s)))
    };
    // Two masters flushed apart, for a holder that held before the first:
    // a renewal in between repairs the first loss, so the two take nothing
    // away together, unless they came within two renewal intervals (a
    // rival that holds the flushed master for a moment when the renewal
    // comes delays the repair to the next one).
    let takes_away = |e: &Event, s: &Section| {
        e.kind.is_tamper()
            && (!redlock || e.masters.len() >= 2)
            && (e.kind != Kind::FlushTwo
                || s.enter > e.start
                || e.end - e.start <= limits.renew * 2 + limits.op)
    };
    let robbed = |s: &Section, until: u64| -> Option<Kind> {
        events
            .iter()
            .find(|e| takes_away(e, s) && e.start <= until && victim(e, s))
            .map(|e| e.kind)
    };

    // A failover around `since` that may have lost a lock granted on the
    // old master (a master that keeps taking writes until it is demoted).
    let failed_over = |since: u64| -> Option<Kind> {
        events
            .iter()
            .find(|e| {
                lossy_failover
                    && matches!(e.kind, Kind::Failover | Kind::ClusterKill)
                    && e.start <= since
                    && since <= e.end + limits.ttl
            })
            .map(|e| e.kind)
    };
    let robbed_untold = |s: &Section, until: u64| -> Option<Kind> {
        events
            .iter()
            .find(|e| {
                takes_away(e, s)
                    && e.start <= until
                    && victim(e, s)
                    && s.exit
                        .as_ref()
                        .is_some_and(|x| x.t <= e.end + limits.loss_report())
            })
            .map(|e| e.kind)
    };

    // Whether a read hold other than `s` is still in Redis at `t`: until
    // its exit, or a TTL past its worker's kill.
    // Sections are sorted by entry, and no read hold lasts ten TTLs (a
    // frozen worker's lasts two): only those that entered in the ten TTLs
    // before `t` are looked at, so the rule stays linear in the history.
    let read_held_at = |sections: &[&Section], s: &Section, t: u64| {
        let entered = sections.partition_point(|n| n.enter < t);
        let since = t.saturating_sub(10 * limits.ttl);
        let before: &[&Section] = sections.get(..entered).unwrap_or_default();
        before
            .iter()
            .rev()
            .take_while(|n| n.enter >= since)
            .any(|n| {
                let until = n
                    .exit
                    .as_ref()
                    .map(|x| x.t)
                    .or_else(|| killed.get(&n.worker).map(|k| k + limits.ttl));
                n.is_read() && !std::ptr::eq(*n, s) && n.enter < t && until.is_none_or(|u| u > t)
            })
    };

    for sections in by_key.values() {
        let mut seen = HashMap::new();
        for s in sections {
            if let Some(w) = seen.insert(s.token, s.worker) {
                v.violate_at(
                    rule::FENCING,
                    format!(
                        "{}: fencing token {} handed out twice (workers {w} and {})",
                        s.key, s.token, s.worker
                    ),
                    s.enter,
                    &s.key,
                    &[s],
                );
            }
        }
        for (i, a) in sections.iter().enumerate() {
            let end = end_of(a);
            if end == u64::MAX {
                v.violate_at(
                    rule::EXCLUSION,
                    format!(
                        "{} token {}: worker {} entered and never left",
                        a.key, a.token, a.worker
                    ),
                    a.enter,
                    &a.key,
                    &[a],
                );
            }
            let mut overlapped = false;
            for b in sections.iter().skip(i + 1).take_while(|b| b.enter < end) {
                if a.is_read() && b.is_read() {
                    continue; // readers share
                }
                overlapped = true;
                // The holder with the older token is the one that should
                // have stopped.
                let (old, new) = if a.token < b.token { (a, b) } else { (b, a) };
                let since = a.enter.max(b.enter);
                // A stale write is one the fence should have refused: begun
                // after the newer holder's fenced read had been accepted, so
                // the resource knew the newer token. One that reaches the
                // resource before the newer holder first touches it is
                // ordered before that holder, which then reads what it
                // wrote (the lost-update check sees to that).
                let wrote = new.read_at.is_some_and(|read| {
                    old.exit
                        .as_ref()
                        .is_some_and(|x| x.set == Op::Ok && x.set_start > read)
                });
                let told = old.told();
                let why = if told.is_some_and(|t| t <= since) {
                    Some(None)
                } else if told.is_some() {
                    // Told after the rival entered: only a frozen process
                    // or a lock taken behind the library's back explains it.
                    frozen(old, since)
                        .or_else(|| robbed(old, since))
                        .or_else(|| failed_over(since))
                        .map(Some)
                } else {
                    // Robbed, and its section ended before a renewal could
                    // have told it; or its renewals went to a demoted
                    // master that still took them (Sentinel's documented
                    // limit without min_replicas).
                    robbed_untold(old, since)
                        .or_else(|| failed_over(since))
                        .map(Some)
                };
                match (why, wrote) {
                    (Some(_), true) => {
                        v.stale_accepted += 1;
                        v.violate_at(
                            rule::STALE_WRITE,
                            format!(
                                "{}: a stale write of token {} (worker {}) was accepted after token {} had read",
                                a.key, old.token, old.worker, new.token
                            ),
                            since,
                            &a.key,
                            &[old, new],
                        );
                    }
                    (Some(None), false) => v.known_before += 1,
                    (Some(Some(kind)), false) => {
                        *v.excused.entry(kind.name().to_owned()).or_default() += 1;
                        v.notes.push(format!(
                            "{}: w{} token {} (enter {}, told {:?}, exit {:?}) / w{} token {} (enter {}): {}",
                            a.key,
                            old.worker,
                            old.token,
                            old.enter,
                            old.told(),
                            old.exit.as_ref().map(|x| x.t),
                            new.worker,
                            new.token,
                            new.enter,
                            kind.name()
                        ));
                    }
                    (None, _) => v.violate_at(
                        rule::EXCLUSION,
                        format!(
                            "{}: worker {} (token {}) and worker {} (token {}) held the lock together \
                             for {:.1} ms, and the first was not told it had lost it (told {})",
                            a.key,
                            old.worker,
                            old.token,
                            new.worker,
                            new.token,
                            ms(end.min(end_of(b)).min(now_ns()).saturating_sub(b.enter)),
                            told.map_or("never".to_owned(), |t| format!(
                                "{:.1} ms after", ms(t.saturating_sub(since))
                            )),
                        ),
                        since,
                        &a.key,
                        &[old, new],
                    ),
                }
            }
            // Tokens rise in the order the lock was held, but for a stale
            // holder that recorded its entry late (it was frozen or cut off
            // in between, and told).
            // Read holds granted together may record their entries in
            // another order.
            let next = sections
                .get(i + 1)
                .filter(|b| !(a.is_read() && b.is_read()));
            if let Some(b) = next {
                if !overlapped && b.token <= a.token {
                    let fenced_off = !b.exit.as_ref().is_some_and(|x| x.set == Op::Ok);
                    let late = fenced_off
                        && ((b.told().is_some()
                            && (cut_off(b, b.enter).is_some()
                                || robbed(b, b.enter).is_some()
                                || failed_over(b.enter).is_some()))
                            || robbed_untold(b, b.enter).is_some());
                    if late {
                        *v.excused
                            .entry("recorded its entry late, and was fenced off".to_owned())
                            .or_default() += 1;
                    } else {
                        v.violate_at(
                            rule::FENCING,
                            format!(
                                "{}: fencing token went from {} to {} between holders",
                                a.key, a.token, b.token
                            ),
                            b.enter,
                            &a.key,
                            &[a, b],
                        );
                    }
                }
            }
        }
    }

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

    // An eviction heard just before `s` recorded its entry took the key of
    // an older holder still in at it, not `s`'s, when `s`'s key is evicted
    // later with nobody else entering the lock in between: `s` set its key
    // (`SET NX`) once the older one was gone, and the key evicted later was
    // its own. Its loss is timed from that later eviction.
    let took_the_older_key = |s: &Section, key: &str, t: u64| -> bool {
        let Some(sections) = by_key.get(lock_of(key)).filter(|_| s.enter > t) else {
            return false;
        };
        let older_in = sections.iter().any(|o| {
            !std::ptr::eq(*o, s) && o.enter <= t && Event::evicted_from(o, key, t, end_of(o))
        });
        let later = events
            .iter()
            .flat_map(|o| &o.evicted)
            .filter(|(k, t2)| k == key && *t2 > t && Event::evicted_from(s, key, *t2, end_of(s)))
            .map(|(_, t2)| *t2)
            .min();
        older_in
            && later.is_some_and(|t2| {
                !sections
                    .iter()
                    .any(|n| !std::ptr::eq(*n, s) && n.enter > t && n.enter < t2)
            })
    };
    // Every holder whose lock was taken away is told by its watchdog, at
    // its next renewal; by its lease's deadline when a fault kept its
    // renewals from getting through.
    for e in events.iter().filter(|e| e.kind.is_tamper() && e.loses) {
        // A restart takes the locks away when the server comes back.
        let from = if matches!(
            e.kind,
            Kind::RestoreSnapshot
                | Kind::RestartAof
                | Kind::RestartEmpty
                | Kind::KillTwo
                | Kind::KillAll
        ) {
            e.end
        } else {
            e.start
        };
        let by_token = e.victims.iter().filter_map(|(key, token, _)| {
            // None: taken from a holder that had not recorded yet.
            let s = by_key
                .get(lock_of(key))?
                .iter()
                .find(|s| s.token == *token)?;
            Some((*s, from))
        });
        let by_eviction = e.evicted.iter().flat_map(|(key, t)| {
            by_key
                .get(lock_of(key))
                .into_iter()
                .flatten()
                .filter(|s| Event::evicted_from(s, key, *t, end_of(s)))
                .filter(|s| !took_the_older_key(s, key, *t))
                .map(|s| (*s, *t))
        });
        let mut victims: Vec<(&Section, u64)> = by_token.chain(by_eviction).collect();
        // A holder whose key was heard evicted twice is one victim, from
        // the first.
        victims.sort_by_key(|(s, from)| (s.worker, s.token, *from));
        victims.dedup_by_key(|(s, _)| (s.worker, s.token));
        for (s, from) in victims {
            let (key, token) = (&s.key, s.token);
            if killed.get(&s.worker).is_some_and(|&k| k > s.enter) && s.told().is_none() {
                continue; // killed before it was told
            }
            let blocked = events.iter().any(|o| {
                (o.kind.blocks_renewals()
                    || (o.kind.cuts_off_worker() && o.worker == Some(s.worker)))
                    && !std::ptr::eq(o, e)
                    && o.start < from + limits.loss_report()
                    && o.end + limits.ttl > s.enter.max(from.saturating_sub(limits.ttl))
            }) || matches!(e.kind, Kind::KillTwo | Kind::KillAll);
            let bound = if blocked {
                limits.loss_report_blocked()
            } else {
                limits.loss_report()
            };
            // Its section ended before a renewal could tell it.
            let ended_first = s.exit.as_ref().is_some_and(|x| x.t <= from + bound);
            match s.told() {
                Some(t) => {
                    let late = t.saturating_sub(from);
                    v.losses_reported += 1;
                    if blocked {
                        v.told_by_deadline += 1;
                    }
                    let m = v.loss_report.entry(e.kind).or_default();
                    *m = (*m).max(late);
                    if late > bound {
                        v.violate_at(
                            rule::LOSS_REPORT,
                            format!(
                                "{key} token {token}: told of the loss ({}) {:.1} ms after it, bound {:.1} ms",
                                e.kind.name(),
                                ms(late),
                                ms(bound)
                            ),
                            from,
                            key,
                            &[s],
                        );
                    }
                }
                None if ended_first => {}
                None => v.violate_at(
                    rule::LOSS_REPORT,
                    format!(
                        "{key} token {token} (worker {}): never told of the loss ({})",
                        s.worker,
                        e.kind.name()
                    ),
                    from,
                    key,
                    &[s],
                ),
            }
        }
    }

    // A lease held while its application holds every pooled connection is
    // kept: the renewals of all its guards share the connection set aside
    // for them. One told lost during a starving round (or within a TTL
    // after it) with no other fault around is a violation.
    for s in by_key.values().flatten() {
        let (Some(began), Some(t)) = (s.starving, s.told()) else {
            continue;
        };
        let ended = s.starved.unwrap_or(u64::MAX);
        if t < began || t > ended.saturating_add(limits.ttl) {
            continue;
        }
        let other = events.iter().any(|e| {
            !(e.kind == Kind::StarvePool && e.worker == Some(s.worker))
                && e.start <= t
                && e.end + limits.ttl >= s.enter
        });
        if !other {
            v.violate_at(
                rule::STARVED,
                format!(
                    "{} token {} (worker {}): lost its lease {:.1} ms into a starving round, with no other fault",
                    s.key,
                    s.token,
                    s.worker,
                    ms(t - began)
                ),
                t,
                &s.key,
                &[s],
            );
        }
    }

    // Forked workers' watchdogs run: a lease told lost with no fault
    // around (from its grant to a TTL after) is a violation.
    if limits.kept_leases {
        for s in by_key.values().flatten() {
            let Some(t) = s.told() else { continue };
            let other = events
                .iter()
                .any(|e| e.start <= t && e.end + limits.ttl >= s.enter);
            if !other {
                v.violate_at(
                    rule::KEPT,
                    format!(
                        "{} token {} (worker {}): lost its lease {:.1} ms after its grant, with no fault around",
                        s.key,
                        s.token,
                        s.worker,
                        ms(t.saturating_sub(s.enter))
                    ),
                    t,
                    &s.key,
                    &[s],
                );
            }
        }
    }

    // After a holder's death, another takes over within TTL + one backoff
    // (more when other faults came in the way, by their length); after a
    // waiter's death, a lock handed to it is claimed for its stay only.
    for e in events
        .iter()
        .filter(|e| matches!(e.kind, Kind::KillHolder | Kind::KillWaiter))
    {
        let Some(w) = e.worker else { continue };
        let in_the_way: u64 = events
            .iter()
            .filter(|o| {
                !std::ptr::eq(*o, e)
                    && o.kind != Kind::ScriptFlush
                    && o.start < e.start + limits.takeover()
                    && o.end + limits.ttl > e.start
            })
            .map(|o| o.end.saturating_sub(o.start) + limits.ttl)
            .sum();
        let bound = limits.takeover() + in_the_way;
        let check_next = |key: &str, from: u64, what: &str, v: &mut Verdict| {
            let next = by_key
                .get(key)
                .and_then(|ss| ss.iter().filter(|n| n.enter > from).map(|n| n.enter).min());
            match next {
                Some(n) => {
                    let took = n - from;
                    let m = v.takeover.entry(e.kind).or_default();
                    *m = (*m).max(took);
                    if took > bound {
                        v.violate_at(
                            rule::TAKEOVER,
                            format!(
                                "{key}: held again {:.1} ms after {what}, bound {:.1} ms",
                                ms(took),
                                ms(bound)
                            ),
                            from,
                            key,
                            &[],
                        );
                    }
                }
                None => v.violate_at(
                    rule::TAKEOVER,
                    format!("{key}: nobody took the lock after {what}"),
                    from,
                    key,
                    &[],
                ),
            }
        };
        if e.kind == Kind::KillHolder {
            let held: Vec<String> = by_key
                .values()
                .flatten()
                .filter(|s| s.worker == w && s.enter < e.start && s.unlock.is_none())
                .map(|s| lock_of(&s.key).to_owned())
                .collect();
            for key in held {
                check_next(&key, e.start, "its holder was killed", &mut v);
            }
        } else {
            // The first clean release of each key after the kill: a lock
            // handed to the dead waiter is claimed for its stay only.
            let claim = limits.backoff + limits.op;
            let bound = claim + limits.backoff + limits.op + limits.slack / 2;
            for (key, sections) in &by_key {
                // An attempt the waiter sent before it died may still reach
                // the server within one operation bound: after a release
                // that gave it the lock as a claim, such an attempt takes the
                // claim up for a whole TTL (the dead waiter then counts as a
                // holder). So the releases looked at come after that.
                let after_kill = e.start + limits.op;
                // A read hold's release while another read hold stays
                // (a killed worker's, until its TTL) frees nothing.
                let mut releases: Vec<(&Section, u64)> = sections
                    .iter()
                    .filter_map(|s| Some((*s, s.exit.as_ref()?.t, s.unlock?)))
                    .filter(|(_, x, (_, u))| *x > after_kill && *u == Unlock::Ok)
                    .map(|(s, x, _)| (s, x))
                    .collect();
                releases.sort_by_key(|(_, x)| *x);
                let release = releases
                    .into_iter()
                    .find(|(s, x)| !read_held_at(sections, s, *x))
                    .map(|(_, x)| x);
                let Some(x) = release else { continue };
                let Some(n) = sections
                    .iter()
                    .filter(|n| n.enter > x)
                    .map(|n| n.enter)
                    .min()
                else {
                    // Never held again: a violation only on evidence that
                    // someone wanted it, a live worker's lock call on it
                    // that waited past the bound (from the release, or from
                    // its ask when later) and failed, with no other fault
                    // in the way. A run going on with other keys proves
                    // nothing: every live worker may be busy elsewhere.
                    // (A live worker's call in flight at the run's end is
                    // recorded: its threads are joined before its end.)
                    let wanted = logs
                        .iter()
                        .filter(|l| l.id != w)
                        .flat_map(|l| l.failed_calls.iter().map(move |c| (l.id, c)))
                        .filter(|(_, (k, _, _))| asked_for(k, key))
                        .filter(|(_, (_, asked, ended))| *ended > (*asked).max(x) + bound)
                        .min_by_key(|(_, (_, _, ended))| *ended);
                    let Some((d, (_, asked, ended))) = wanted else {
                        continue;
                    };
                    let quiet = !events.iter().any(|o| {
                        !std::ptr::eq(o, e)
                            && o.kind != Kind::ScriptFlush
                            && o.kind != Kind::KillWaiter
                            && o.start < *ended
                            && o.end + limits.ttl > x
                    });
                    if quiet {
                        let rel = |t: u64| (t as f64 - x as f64) / MS as f64;
                        v.violate_at(
                            rule::TAKEOVER,
                            format!(
                                "{key}: not held again after the first release that followed a waiter's kill (worker {w}), though worker {d} asked for it at {:+.1} ms and failed at {:+.1} ms, bound {:.1} ms",
                                rel(*asked),
                                rel(*ended),
                                ms(bound)
                            ),
                            x,
                            key,
                            &[],
                        );
                    }
                    continue;
                };
                // Timed from when someone wanted it: the earliest live
                // worker's call on the key asked after the release (or in
                // flight at it), whether it entered or failed. A free lock
                // nobody asked for is not late.
                let demand = sections
                    .iter()
                    .filter(|s| s.worker != w && s.enter > x && asked_for(&s.key, key))
                    .map(|s| s.asked.max(x))
                    .chain(
                        logs.iter()
                            .filter(|l| l.id != w)
                            .flat_map(|l| l.failed_calls.iter())
                            .filter(|(k, _, ended)| asked_for(k, key) && *ended > x)
                            .map(|(_, asked, _)| (*asked).max(x)),
                    )
                    .min()
                    .unwrap_or(n)
                    .min(n);
                let took = n - demand;
                let m = v.takeover.entry(e.kind).or_default();
                *m = (*m).max(took);
                let quiet = !events.iter().any(|o| {
                    !std::ptr::eq(o, e)
                        && o.kind != Kind::ScriptFlush
                        && o.start < n
                        && o.end + limits.ttl > x
                });
                if quiet && took > bound {
                    v.violate_at(
                        rule::TAKEOVER,
                        format!(
                            "{key}: held again {:.1} ms after the first release that followed a waiter's kill (worker {w}), and {:.1} ms after a live worker asked for it, bound {:.1} ms",
                            ms(n - x),
                            ms(took),
                            ms(bound)
                        ),
                        x,
                        key,
                        &[],
                    );
                }
            }
        }
    }

    // A caller waiting for a lock gets it promptly after a clean release,
    // outside faults.
    let calls = lock_calls(logs);
    let quiet = |from: u64, to: u64| {
        !events.iter().any(|e| {
            e.kind != Kind::ScriptFlush
                && e.start < to
                && e.end + limits.ttl + limits.handover() > from
        })
    };
    for (key, sections) in &by_key {
        for s in sections {
            // With the server reachable and no fault under way, a release
            // succeeds.
            if let (Some((u, Unlock::Err)), Some(x)) = (s.unlock, s.exit.as_ref()) {
                if quiet(x.t, u) {
                    v.violate_at(
                        rule::RELEASE_ERROR,
                        format!(
                            "{key}: worker {}'s unlock of token {} failed with no fault under way",
                            s.worker, s.token
                        ),
                        x.t,
                        key,
                        &[s],
                    );
                }
            }
            let (Some((u, Unlock::Ok)), Some(x)) = (s.unlock, s.exit.as_ref()) else {
                continue;
            };
            let until = u + limits.handover();
            let waiting = calls
                .iter()
                .any(|(k, asked, ended)| k == key && *asked < u && *ended > until);
            // A read hold released while other readers hold frees nothing.
            if !waiting || read_held_at(sections, s, u) || !quiet(x.t, until) {
                continue;
            }
            // The next holder may record its entry before the releaser
            // records what `unlock` said.
            if !sections.iter().any(|n| n.enter > x.t && n.enter <= until) {
                v.violate_at(
                    rule::HANDOVER,
                    format!(
                        "{key}: released by worker {} (token {}) while others waited, and nobody had it {:.1} ms later",
                        s.worker,
                        s.token,
                        ms(limits.handover())
                    ),
                    u,
                    key,
                    &[s],
                );
            }
        }
    }
    v
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

/// `t` against `at`, in signed milliseconds.
fn rel(t: u64, at: u64) -> String {
    let d = i128::from(t) - i128::from(at);
    format!("{:+.1} ms", d as f64 / MS as f64)
}

impl Event {
    /// One line for people, its times against `at`.
    pub fn describe(&self, at: u64) -> String {
        let mut s = format!(
            "{} from {} to {}",
            self.kind.name(),
            rel(self.start, at),
            rel(self.end, at)
        );
        if let Some(w) = self.worker {
            let _ = write!(s, ", worker {w}");
        }
        if !self.masters.is_empty() {
            let _ = write!(s, ", masters {:?}", self.masters);
        }
        if !self.victims.is_empty() {
            let shown: Vec<String> = self
                .victims
                .iter()
                .take(12)
                .map(|(k, t, w)| format!("{k} {t} (w{})", w.map_or("?".into(), |w| w.to_string())))
                .collect();
            let more = self.victims.len().saturating_sub(shown.len());
            let _ = write!(s, ", took {}", shown.join(", "));
            if more > 0 {
                let _ = write!(s, " and {more} more");
            }
        }
        if !self.evicted.is_empty() {
            let shown: Vec<String> = self
                .evicted
                .iter()
                .take(12)
                .map(|(k, t)| format!("{k} at {}", rel(*t, at)))
                .collect();
            let more = self.evicted.len().saturating_sub(shown.len());
            let _ = write!(s, ", evicted (heard) {}", shown.join(", "));
            if more > 0 {
                let _ = write!(s, " and {more} more");
            }
        }
        s
    }

    /// The whole event, with absolute times, for a kept history.
    pub fn record(&self) -> String {
        format!(
            "{:?} {} {} worker {:?} loses {} masters {:?} victims {:?} evicted {:?}",
            self.kind,
            self.start,
            self.end,
            self.worker,
            self.loses,
            self.masters,
            self.victims,
            self.evicted
        )
    }
}

impl Section {
    /// Its records, times against `at`.
    fn describe(&self, at: u64) -> String {
        let mut s = format!(
            "w{} {} token {}: asked {}, entered {}",
            self.worker,
            self.key,
            self.token,
            rel(self.asked, at),
            rel(self.enter, at)
        );
        if let Some(t) = self.read_at {
            let _ = write!(s, ", fenced read {}", rel(t, at));
        }
        if let (Some(b), Some(e)) = (self.starving, self.starved) {
            let _ = write!(s, ", starving {} to {}", rel(b, at), rel(e, at));
        }
        if let Some(t) = self.lost_at {
            let _ = write!(s, ", told lost {}", rel(t, at));
        }
        match &self.exit {
            Some(x) => {
                let _ = write!(
                    s,
                    ", exit {} (write {}, is_lost {})",
                    rel(x.t, at),
                    x.set.code(),
                    x.lost
                );
            }
            None => s += ", no exit",
        }
        if let Some((t, u)) = self.unlock {
            let _ = write!(s, ", unlock {} {}", rel(t, at), u.code());
        }
        s
    }
}

/// What a report needs to explain `v` on its own: the faults injected
/// within three TTLs of it, the records of the sections it names, and those
/// of the other sections of its lock nearest to it, with every time against
/// the violation's moment. Empty for a violation with no moment.
pub fn explain(v: &Violation, logs: &[WorkerLog], events: &[Event], limits: &Limits) -> String {
    let Some(at) = v.at else {
        return String::new();
    };
    let window = 3 * limits.ttl;
    let mut s = String::new();
    let near: Vec<&Event> = events
        .iter()
        .filter(|e| e.start <= at + window && e.end + window >= at)
        .collect();
    if near.is_empty() {
        s += "      no fault injected within 3 TTLs\n";
    }
    for e in near {
        let _ = writeln!(s, "      fault: {}", e.describe(at));
    }
    let Some(lock) = &v.lock else {
        return s;
    };
    let sections: Vec<&Section> = logs
        .iter()
        .flat_map(|l| &l.sections)
        .filter(|x| lock_of(&x.key) == lock)
        .collect();
    let named = |x: &Section| v.involved.contains(&(x.worker, x.token));
    for x in sections.iter().filter(|x| named(x)) {
        let _ = writeln!(s, "      * {}", x.describe(at));
    }
    let mut others: Vec<&Section> = sections
        .iter()
        .filter(|x| !named(x) && x.enter.abs_diff(at) <= window)
        .copied()
        .collect();
    others.sort_by_key(|x| x.enter.abs_diff(at));
    others.truncate(8);
    others.sort_by_key(|x| x.enter);
    for x in others {
        let _ = writeln!(s, "        {}", x.describe(at));
    }
    let mut failed: Vec<(u32, &(String, u64, u64))> = logs
        .iter()
        .flat_map(|l| l.failed_calls.iter().map(move |c| (l.id, c)))
        .filter(|(_, (k, _, ended))| lock_of(k) == lock && ended.abs_diff(at) <= window)
        .collect();
    failed.sort_by_key(|(_, (_, _, ended))| ended.abs_diff(at));
    failed.truncate(5);
    for (w, (k, asked, ended)) in failed {
        let _ = writeln!(
            s,
            "        w{w} {k}: a lock call asked {} failed {}",
            rel(*asked, at),
            rel(*ended, at)
        );
    }
    s
}
