//! The faults, injected into a running scenario.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::Run;
use crate::common::{self, SOMEONE_ELSE};
use crate::history::{self, now_ns, rule, wall_offset_ns, Event, Kind};
use crate::support::{lock_name, victims_of};
use crate::worker::{PREFIX, SLOW_KEY};
use crate::{SlowWaiters, REDLOCK_IO, TTL};
use redmutex_testkit::proxy::Mode;

impl Run<'_> {
    pub(super) fn inject(&mut self, kind: Kind) {
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
            Kind::PauseHolder | Kind::PauseLinearHolder => {
                let pos = if kind == Kind::PauseHolder {
                    self.holder()
                } else {
                    // Not landed when no holder was found between its read
                    // and its write.
                    let Some(pos) = self.linear_holder() else {
                        return;
                    };
                    pos
                };
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
    pub(super) fn appendonly(&self, on: bool) {
        self.servers[0].config_set("appendonly", if on { "yes" } else { "no" });
    }

    /// Kills server 0 with `kill -9` and starts it again: from an RDB
    /// snapshot taken a moment before, from its AOF (fsync every second),
    /// or with no data at all.
    pub(super) fn restart(&mut self, kind: Kind, event: &mut Event) {
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
    pub(super) fn tamper(&mut self, action: &str) -> (u64, Vec<(String, u64, Option<u32>)>) {
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
    pub(super) fn break_one(&mut self) -> (u64, Vec<(String, u64, Option<u32>)>) {
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
    pub(super) fn watch_clock(&mut self) {
        let o = wall_offset_ns();
        self.wall = (self.wall.0.min(o), self.wall.1.max(o));
    }
}

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
