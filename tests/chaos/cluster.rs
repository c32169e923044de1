//! The cluster scenario: worker processes (the suite's workers, see
//! `worker.rs`, on a cluster pool) lock and unlock `k0`-`k2` and `slow` on a
//! Redis Cluster of three masters with a replica each, while the
//! coordinator fails a master over (`CLUSTER FAILOVER` on its replica), moves
//! the slow key's slot to another master under its waiters, and kills a
//! master (`SIGKILL`), waits for the cluster to promote its replica (see
//! [`NODE_ARGS`]; forced with `CLUSTER FAILOVER TAKEOVER` after
//! [`PROMOTION`]), then restarts the killed node, which rejoins as a
//! replica.
//!
//! The usual rules (`history::check`): exclusion, fencing rising,
//! loss-report, hand-over; a kill is lossy (writes not yet replicated are
//! lost, the documented limit of asynchronous replication, as Sentinel
//! without `min_replicas`), a coordinated failover and a migration are not.
//!
//! Rule `wake-up`: no waiter waits past the wake-up bound for a hand-over
//! it was given. The workers' backoff is a minute, so a waiter left to its
//! backoff calls about once a second (a queued waiter's refresh, or the
//! holder's lease's end); a lock released while a worker's call waited must
//! be entered by the next holder within [`WAKE`] of the release returning,
//! less than that second.
//! Releases during a fault and for [`RECOVERY`] after it (the listener
//! follows the slot to its new master: a second of idle check, a second
//! before a failed master is tried again, then every waiter woken once)
//! are excused and counted. The negative control runs the same workers
//! with wake-ups off (the default user loses its channel rights on every
//! node: the scripts' `SPUBLISH` is skipped, the listener's `SSUBSCRIBE`
//! refused, waiters poll) and must trip the rule.
//!
//! `REDMUTEX_CHAOS_ONLY=cluster cargo test --all-features --test chaos` runs
//! the scenario and its control alone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, Cluster, Server, TempDir};
// The suite's TTL, I/O bound and scheduling slack; the workers' backoff,
// every time (only a wake-up is prompt), and the pause of a queued waiter.
use crate::history::{
    check, explain, lock_calls, lock_of, ms, now_ns, rule, summary, Event, Kind, Limits, Section,
    Unlock, Verdict, Violation, WorkerLog, MS,
};
use crate::worker::{self, resource_keys, Settings, FAST_KEYS, PREFIX, SLOW_KEY};
use crate::{IO, QUEUED_PAUSE, SLOW_BACKOFF as BACKOFF, TTL};

/// The rule this scenario adds.
pub const RULE: &str = "wake-up";
/// From a release to the next holder's entry, when someone waited: three
/// quarters of the pause of a waiter that polls (a woken one takes about a
/// millisecond; a loaded run's slowest was about 500 ms).
const WAKE: Duration = Duration::from_millis(750);
/// How long after a fault ended releases are not held to the wake-up rule.
const RECOVERY: Duration = Duration::from_millis(3000);
const WORKERS: u32 = 3;
/// Time given to the system after each fault: longer than [`RECOVERY`], so
/// that hand-overs after each fault are checked.
const GAP: Duration = Duration::from_millis(5000);

/// Every node's arguments: a killed master's replica is promoted by the
/// cluster about two to three seconds after the kill. Without a validity
/// factor of 0, a replica of a master that took no writes for a while
/// refuses to stand ("Disconnected from master for longer than allowed":
/// its data age counts from the master's last ping, every 10 s), which is
/// why a test killing a master with `cluster-node-timeout 1000` saw no
/// promotion within 30 s. 2 s rather than 1: a node paused a second on a
/// loaded machine is not failed over unasked.
const NODE_ARGS: &[&str] = &[
    "--cluster-node-timeout",
    "2000",
    "--cluster-replica-validity-factor",
    "0",
];
/// How long the coordinator waits for the cluster to promote a killed
/// master's replica before it forces it (`CLUSTER FAILOVER TAKEOVER`).
const PROMOTION: Duration = Duration::from_secs(20);

/// The faults of the short profile, in order (the kill last: its shard has
/// no replica afterwards).
const SHORT: [Kind; 3] = [Kind::ClusterFailover, Kind::SlotMigrate, Kind::ClusterKill];
const LONG: [Kind; 7] = [
    Kind::ClusterFailover,
    Kind::SlotMigrate,
    Kind::ClusterFailover,
    Kind::SlotMigrate,
    Kind::ClusterFailover,
    Kind::SlotMigrate,
    Kind::ClusterKill,
];

/// The wake-up rule's findings.
#[derive(Debug, Default)]
pub struct Wakeups {
    pub violations: Vec<Violation>,
    /// Releases with a waiter, checked.
    pub checked: usize,
    /// Releases with a waiter during or just after a fault.
    pub excused: usize,
    /// From each checked release's call to the next holder's entry (ns).
    pub takeups: Vec<u64>,
}

/// A lock's calls as (started, ended), and the longest one's length.
type Calls = (Vec<(u64, u64)>, u64);

/// The wake-up rule over the merged history: a lock released (`unlock`
/// said `Ok`) while another call on it was under way is entered by someone
/// within `bound` of the release returning, unless a fault was under way
/// (or ended less than `recovery` before).
pub fn wakeups(logs: &[WorkerLog], events: &[Event], bound: u64, recovery: u64) -> Wakeups {
    let mut w = Wakeups::default();
    let mut by_key: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    for s in logs.iter().flat_map(|l| &l.sections) {
        by_key.entry(lock_of(&s.key)).or_default().push(s);
    }
    for sections in by_key.values_mut() {
        sections.sort_by_key(|s| s.enter);
    }
    // Each lock's calls as (started, ended), by start, and the longest.
    let mut calls: BTreeMap<&str, Calls> = BTreeMap::new();
    for (k, asked, ended) in lock_calls(logs) {
        let (list, longest) = calls.entry(k).or_default();
        list.push((asked, ended));
        *longest = (*longest).max(ended.saturating_sub(asked));
    }
    for (list, _) in calls.values_mut() {
        list.sort_unstable();
    }
    for (key, sections) in &by_key {
        let Some((list, longest)) = calls.get(key) else {
            continue;
        };
        for s in sections {
            let (Some((u, Unlock::Ok)), Some(x)) = (s.unlock, s.exit.as_ref()) else {
                continue;
            };
            // The calls started before the release and still under way:
            // none started more than the longest call before it.
            let (from, to) = (
                list.partition_point(|(a, _)| *a < x.t.saturating_sub(*longest)),
                list.partition_point(|(a, _)| *a < x.t),
            );
            let waited: Vec<u64> = list[from..to]
                .iter()
                .filter(|(_, ended)| *ended > x.t)
                .map(|(_, ended)| *ended)
                .collect();
            if waited.is_empty() {
                continue;
            }
            let faulty = events
                .iter()
                .any(|e| e.start < u + bound && x.t < e.end + recovery);
            if faulty {
                w.excused += 1;
                continue;
            }
            let next = sections
                .get(sections.partition_point(|n| n.enter <= x.t))
                .map(|n| n.enter);
            match next {
                Some(n) if n <= u + bound => {
                    w.checked += 1;
                    w.takeups.push(n - x.t);
                }
                // Nobody entered in time: a violation if a call still
                // waited then (one that gave up earlier waits no more).
                _ if waited.iter().any(|e| *e > u + bound) => {
                    w.checked += 1;
                    let late = next.map_or("never".to_owned(), |n| {
                        format!("{:.0} ms after the release", ms(n.saturating_sub(u)))
                    });
                    w.violations.push(Violation {
                        rule: RULE,
                        text: format!(
                            "{key}: released by worker {} (token {}) while another call waited; \
                             the next holder entered {late} (bound {:.0} ms): a hand-over taken \
                             up by a poll, not a wake-up",
                            s.worker,
                            s.token,
                            ms(bound)
                        ),
                        at: Some(u),
                        lock: Some((*key).to_owned()),
                        involved: vec![(s.worker, s.token)],
                    });
                }
                _ => {}
            }
        }
    }
    w
}

/// What one run saw.
struct Outcome {
    verdict: Verdict,
    wake: Wakeups,
    events: Vec<Event>,
    /// Per violation (the verdict's, then the wake-up rule's): the faults
    /// and records around it (see `history::explain`).
    explained: Vec<String>,
}

struct Run {
    cluster: Cluster,
    resource: Server,
    dir: TempDir,
    workers: Vec<(u32, Child, Option<ChildStdin>)>,
    events: Vec<Event>,
    /// A turn through the keys, to vary the faults' targets.
    turn: usize,
}

impl Run {
    fn log_path(&self, id: u32) -> PathBuf {
        self.dir.0.join(format!("worker-{id}.log"))
    }

    fn spawn(&mut self, id: u32) {
        let settings = Settings {
            id,
            lock_urls: self.cluster.urls(),
            resource_url: self.resource.url(),
            out: self.log_path(id),
            ttl: TTL,
            io: IO,
            backoff_max: BACKOFF,
            flaw: None,
            sentinel: None,
            clock_ahead: Duration::ZERO,
            forks: 0,
            cluster: true,
        };
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .env(worker::ENV, settings.encode())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a worker process");
        let stdin = child.stdin.take();
        self.workers.push((id, child, stdin));
    }

    /// The slot of the lock on `key`, and the master (index) serving it.
    fn master_of(&self, key: &str) -> (u16, usize) {
        let slot = self.cluster.slot_of(&format!("{PREFIX}:{key}"));
        (slot, self.cluster.master_of(slot))
    }

    /// A fast key's master with a replica (a killed master's shard has none).
    fn target(&mut self) -> usize {
        for _ in 0..FAST_KEYS.len() * 2 {
            self.turn += 1;
            let (_, m) = self.master_of(FAST_KEYS[self.turn % FAST_KEYS.len()]);
            if self.replica(m).is_some() {
                return m;
            }
        }
        panic!("no master with a replica serves a fast key");
    }

    /// A live replica of master `m`.
    fn replica(&self, m: usize) -> Option<usize> {
        let id = self.cluster.node_id(m);
        (0..self.cluster.nodes.len()).find(|&j| {
            let Ok(mut c) = redis::Client::open(self.cluster.nodes[j].url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
            else {
                return false;
            };
            let nodes: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query(&mut c)
                .unwrap_or_default();
            nodes
                .lines()
                .any(|l| l.contains("myself") && l.contains("slave") && l.contains(&id))
        })
    }

    fn inject(&mut self, kind: Kind) {
        let mut event = Event {
            kind,
            start: now_ns(),
            end: 0,
            worker: None,
            victims: Vec::new(),
            loses: false,
            masters: Vec::new(),
            evicted: Vec::new(),
        };
        match kind {
            Kind::ClusterFailover => {
                let m = self.target();
                let r = self.replica(m).expect("a replica");
                event.masters = vec![m];
                event.start = now_ns();
                self.cluster.fail_over_to(r);
            }
            Kind::SlotMigrate => {
                // The slow key: held about a TTL by one worker at a time,
                // with the others queued behind.
                let (slot, from) = self.master_of(SLOW_KEY);
                let to = (1..=FAST_KEYS.len())
                    .map(|i| {
                        self.master_of(FAST_KEYS[(self.turn + i) % FAST_KEYS.len()])
                            .1
                    })
                    .chain([0, 5461, 10923].map(|s| self.cluster.master_of(s)))
                    .find(|&m| m != from)
                    .expect("another master");
                event.masters = vec![from, to];
                event.start = now_ns();
                self.cluster.migrate_slot(slot, from, to);
            }
            Kind::ClusterKill => {
                let m = self.target();
                let r = self.replica(m).expect("a replica");
                event.masters = vec![m];
                event.start = now_ns();
                self.cluster.nodes[m].kill();
                let promoted = |c: &Cluster| {
                    redis::cmd("ROLE")
                        .query::<Vec<redis::Value>>(&mut c.conn(r))
                        .is_ok_and(|role| {
                            matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master")
                        })
                };
                // The cluster promotes the replica by itself: the other
                // masters flag the node as failed after the node timeout,
                // and the replica wins the election (see `NODE_ARGS`).
                let given_up = Instant::now() + PROMOTION;
                while !promoted(&self.cluster) && Instant::now() < given_up {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if !promoted(&self.cluster) {
                    println!(
                        "    the replica was not promoted within {PROMOTION:?}: CLUSTER FAILOVER \
                         TAKEOVER"
                    );
                    let _: () = redis::cmd("CLUSTER")
                        .arg("FAILOVER")
                        .arg("TAKEOVER")
                        .query(&mut self.cluster.conn(r))
                        .expect("CLUSTER FAILOVER TAKEOVER");
                    common::wait_until("the replica promoted", Duration::from_secs(30), || {
                        promoted(&self.cluster)
                    });
                }
                // The killed master comes back (as a supervisor would bring
                // it), from its cluster configuration file: it rejoins as a
                // replica of the promoted one (it holds back writes for a
                // while after a restart until the cluster has told it so),
                // and answers clients that still route its old slots to it
                // `MOVED`. A redis-rs cluster connection retries a dead
                // node's address and never refreshes its slots otherwise.
                self.cluster.nodes[m]
                    .restart(Duration::from_secs(10))
                    .expect("restart the killed master");
                let id = self.cluster.node_id(r);
                common::wait_until(
                    "the killed master back as a replica",
                    Duration::from_secs(30),
                    || {
                        let nodes: String = redis::cmd("CLUSTER")
                            .arg("NODES")
                            .query(&mut self.cluster.conn(m))
                            .unwrap_or_default();
                        nodes
                            .lines()
                            .any(|l| l.contains("myself") && l.contains("slave") && l.contains(&id))
                    },
                );
                self.cluster.await_ok();
            }
            _ => panic!("not a cluster fault: {kind:?}"),
        }
        event.end = now_ns();
        self.events.push(event);
    }

    fn finish(mut self) -> Outcome {
        let mut extra = Vec::new();
        for (_, _, stdin) in &mut self.workers {
            *stdin = None;
        }
        let give_up = Instant::now() + Duration::from_secs(30);
        for (id, child, _) in &mut self.workers {
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        if !status.success() {
                            extra.push(Violation::new(
                                rule::CLEAN_END,
                                format!("worker {id} exited with {status}"),
                            ));
                        }
                        break;
                    }
                    _ if Instant::now() > give_up => {
                        extra.push(Violation::new(
                            rule::CLEAN_END,
                            format!("worker {id} did not stop"),
                        ));
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        // The fenced counters lost no update.
        let mut res = self.resource.conn();
        for key in FAST_KEYS.iter().chain([&SLOW_KEY]) {
            let [_, count, stats] = resource_keys(key);
            let counter: Option<u64> = redis::cmd("GET").arg(&count).query(&mut res).unwrap();
            let accepted: Option<u64> = redis::cmd("HGET")
                .arg(&stats)
                .arg("accepted")
                .query(&mut res)
                .unwrap();
            if counter.unwrap_or(0) != accepted.unwrap_or(0) {
                extra.push(Violation::new(
                    rule::LOST_UPDATE,
                    format!("{key}: counter {counter:?} after {accepted:?} accepted increments"),
                ));
            }
        }
        let logs: Vec<WorkerLog> = self
            .workers
            .iter()
            .map(|(id, _, _)| {
                let text = std::fs::read_to_string(self.log_path(*id)).unwrap_or_default();
                WorkerLog::parse(*id, &text)
            })
            .collect();
        if let Ok(keep) = std::env::var("REDMUTEX_CHAOS_KEEP") {
            let to = PathBuf::from(keep).join("cluster");
            let _ = std::fs::create_dir_all(&to);
            for (id, _, _) in &self.workers {
                let _ = std::fs::copy(self.log_path(*id), to.join(format!("worker-{id}.log")));
            }
        }
        let limits = limits();
        // Only a kill loses writes (see `history::check`'s lossy failover).
        let mut verdict = check(&logs, &self.events, &limits, false, true);
        verdict.violations.append(&mut extra);
        let wake = wakeups(&logs, &self.events, nanos(WAKE), nanos(RECOVERY));
        let explained = verdict
            .violations
            .iter()
            .chain(&wake.violations)
            .map(|v| explain(v, &logs, &self.events, &limits))
            .collect();
        Outcome {
            verdict,
            wake,
            events: self.events,
            explained,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    crate::nanos(d)
}

/// The suite's bounds, with a queued waiter's pause for the backoff (as
/// for its slow waiters).
fn limits() -> Limits {
    let mut limits = crate::limits(IO);
    limits.backoff = nanos(QUEUED_PAUSE);
    limits
}

/// One run: the cluster, the workers, the faults one after the other
/// (none: `quiet` of undisturbed work), then the checks. `wake_ups`
/// false: the default user has no channel rights on any node.
fn run(faults: &[Kind], quiet: Duration, wake_ups: bool) -> Outcome {
    let started = Instant::now();
    // Replicas only where a fault needs them (cheaper for the control).
    let replicas = usize::from(!faults.is_empty());
    let cluster = Cluster::start_configured(replicas, NODE_ARGS);
    if !wake_ups {
        for i in 0..cluster.nodes.len() {
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg("default")
                .arg("resetchannels")
                .query(&mut cluster.conn(i))
                .unwrap();
        }
    }
    let mut r = Run {
        cluster,
        resource: Server::start(),
        dir: TempDir::new("chaos-cluster"),
        workers: Vec::new(),
        events: Vec::new(),
        turn: 0,
    };
    for id in 0..WORKERS {
        r.spawn(id);
    }
    common::wait_until(
        "every worker in a critical section",
        Duration::from_secs(30),
        || {
            r.workers.iter().all(|(id, _, _)| {
                std::fs::read_to_string(r.log_path(*id)).is_ok_and(|t| t.contains("E "))
            })
        },
    );
    println!(
        "    cluster and workers up in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(quiet);
    for &k in faults {
        r.inject(k);
        std::thread::sleep(GAP);
    }
    let finishing = Instant::now();
    let out = r.finish();
    println!(
        "    workers stopped and history checked in {:.1} s",
        finishing.elapsed().as_secs_f64()
    );
    out
}

fn percentile(sorted: &[u64], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    ms(sorted[(sorted.len() - 1) * p / 100])
}

fn print_wake(w: &Wakeups) {
    let mut t = w.takeups.clone();
    t.sort_unstable();
    println!(
        "    wake-ups: {} hand-overs with a waiter checked ({} excused near faults), take-up from \
         the release call p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} [{RULE}] violations",
        w.checked,
        w.excused,
        percentile(&t, 50),
        percentile(&t, 99),
        percentile(&t, 100),
        w.violations.len()
    );
}

/// The scenario (the long profile repeats failovers and migrations) and its
/// negative control; prints their lines like the other scenarios', and
/// returns how many ran and whether all passed.
pub fn scenario_and_control(only: Option<&str>, long: bool) -> (usize, bool) {
    let (mut runs, mut ok) = (0, true);
    let name = "cluster: failover, slot migrated under waiters, master killed";
    if only.is_none_or(|o| name.contains(o)) {
        runs += 1;
        let started = Instant::now();
        let faults: &[Kind] = if long { &LONG } else { &SHORT };
        let out = run(faults, GAP / 2, true);
        println!("{name:<52} {}", summary(&out.verdict));
        print_wake(&out.wake);
        for e in &out.events {
            println!(
                "    {} (masters {:?}) took {:.0} ms",
                e.kind.name(),
                e.masters,
                ms(e.end - e.start)
            );
        }
        println!("    run time {:.0} s", started.elapsed().as_secs_f64());
        let violations: Vec<&Violation> = out
            .verdict
            .violations
            .iter()
            .chain(&out.wake.violations)
            .collect();
        for (v, why) in violations.iter().zip(&out.explained).take(10) {
            println!("    VIOLATION: {v}");
            print!("{why}");
        }
        if out.wake.checked == 0 {
            println!("    FAILED: no hand-over with a waiter was checked: the rule saw nothing");
        }
        ok &= violations.is_empty() && out.wake.checked > 0;
    }
    let name = "negative control: cluster-without-wake-ups";
    if only.is_none_or(|o| name.contains(o) || o.contains("control")) {
        runs += 1;
        let out = run(&[], Duration::from_secs(3), false);
        let tripped = out.wake.violations.len();
        println!(
            "{name:<52} {tripped} [{RULE}] violations, {} in all (expected: some [{RULE}])",
            tripped + out.verdict.violations.len()
        );
        print_wake(&out.wake);
        if let Some(v) = out.wake.violations.first() {
            println!("    e.g. {v}");
        }
        if tripped == 0 {
            println!("    FAILED: the [{RULE}] rule saw nothing wrong with waiters left to poll");
            ok = false;
        }
    }
    (runs, ok)
}

/// The rule, on made-up histories: a release with a waiter taken up at
/// once passes, one taken up at the waiter's next poll (900 ms later) does
/// not; one during a fault is excused.
pub fn checker_finds_late_takeups() {
    use crate::history::{line, Op};
    let ms_ = |t: u64| t * MS;
    // Worker 0 holds k0 from 0 to 10 ms; worker 1 asked at 5 ms and enters
    // at `then` ms.
    let logs = |then: u64| -> Vec<WorkerLog> {
        let first = [
            line::enter("k0", 1, ms_(0), ms_(0)),
            line::exit("k0", 1, ms_(10), Op::Ok, Op::Ok, ms_(10), false),
            line::unlock("k0", 1, ms_(11), Unlock::Ok),
            line::end(ms_(2000), 0),
        ]
        .concat();
        let second = [
            line::enter("k0", 2, ms_(then), ms_(5)),
            line::exit("k0", 2, ms_(then + 1), Op::Ok, Op::Ok, ms_(then + 1), false),
            line::unlock("k0", 2, ms_(then + 2), Unlock::Ok),
            line::end(ms_(2000), 0),
        ]
        .concat();
        vec![WorkerLog::parse(0, &first), WorkerLog::parse(1, &second)]
    };
    let (bound, recovery) = (nanos(WAKE), nanos(RECOVERY));
    let woken = wakeups(&logs(12), &[], bound, recovery);
    assert!(woken.violations.is_empty(), "{:?}", woken.violations);
    assert_eq!(woken.checked, 1);
    let polled = wakeups(&logs(911), &[], bound, recovery);
    assert_eq!(polled.violations.len(), 1, "{:?}", polled.violations);
    let fault = Event {
        kind: Kind::SlotMigrate,
        start: ms_(8),
        end: ms_(9),
        worker: None,
        victims: Vec::new(),
        loses: false,
        masters: Vec::new(),
        evicted: Vec::new(),
    };
    let excused = wakeups(&logs(911), &[fault], bound, recovery);
    assert!(excused.violations.is_empty(), "{:?}", excused.violations);
    assert_eq!(excused.excused, 1);
}
