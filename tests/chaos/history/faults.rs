//! The faults the coordinator injects, and each injected fault as the
//! checker reads it.

use super::{Section, Unlock, WorkerLog, MS};

/// The faults the coordinator injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    KillHolder,
    KillWaiter,
    PauseHolder,
    /// The workloads' lock's holder frozen (`SIGSTOP`) between its reads
    /// and its writes, for 2 TTL: the linearizability control's fault.
    PauseLinearHolder,
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
            Kind::PauseLinearHolder => "SIGSTOP of a workload holder between read and write",
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
                | Kind::PauseLinearHolder
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
        matches!(self, Kind::PauseHolder | Kind::PauseLinearHolder)
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
    pub(super) fn evicted_from(s: &Section, key: &str, t: u64, end: u64) -> bool {
        s.key == key
            && s.unlock.is_none_or(|(_, u)| u != Unlock::Ok)
            && s.asked <= t
            && s.enter <= t + EVICTION_HEARD
            && end >= t.saturating_sub(EVICTION_HEARD)
    }
}
