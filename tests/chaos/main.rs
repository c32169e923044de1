//! The fault suite: worker processes contend for locks while faults are
//! injected, and a checker reads the recorded history.
//!
//! `cargo test --test chaos` runs the short profile (every fault in its own
//! scenario, a Redlock scenario, and the negative control);
//! `REDMUTEX_CHAOS=long cargo test --release --test chaos` adds long soaks
//! that mix every fault, and prints the figures that `RELIABILITY.md` lists.
//! `REDMUTEX_CHAOS_REPORT=<file>` also writes them to a file.
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
#[path = "../common/mod.rs"]
mod common;
mod history;
mod worker;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use common::proxy::{Mode, Proxy};
use common::{fence_in, Server, TempDir, SOMEONE_ELSE};
use history::{check, ms, now_ns, summary, Event, Kind, Limits, Verdict, WorkerLog};
use worker::{resource_keys, Rng, Settings, FAST_KEYS, PREFIX, SLOW_KEY};

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

#[derive(Debug, Clone)]
struct Scenario {
    name: String,
    redlock: bool,
    broken: bool,
    faults: Vec<Kind>,
    /// Mix the faults at random for this long instead of once each.
    soak: Option<Duration>,
}

impl Scenario {
    fn one(kind: Kind) -> Scenario {
        Scenario {
            name: kind.name().to_owned(),
            redlock: false,
            broken: false,
            faults: vec![kind],
            soak: None,
        }
    }
}

fn main() {
    if let Ok(spec) = std::env::var(worker::ENV) {
        worker::main(&spec);
        return;
    }
    // Behave as a one-test libtest binary: `--list`, and name filters.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("chaos: test");
        return;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if !filters.is_empty() && !filters.iter().any(|f| "chaos".contains(f.as_str())) {
        println!("chaos: filtered out");
        return;
    }
    let long = std::env::var("REDMUTEX_CHAOS").is_ok_and(|v| v == "long");
    let started = Instant::now();
    let mut failed = false;
    let mut totals = Totals::default();

    let mut scenarios: Vec<Scenario> = Kind::ALL.iter().map(|k| Scenario::one(*k)).collect();

    scenarios.push(Scenario {
        name: "Redlock over 3 masters".into(),
        redlock: true,
        broken: false,
        faults: REDLOCK_FAULTS.to_vec(),
        soak: None,
    });
    if long {
        scenarios.push(Scenario {
            name: "soak: every fault, mixed".into(),
            redlock: false,
            broken: false,
            faults: Kind::ALL.to_vec(),
            soak: Some(Duration::from_secs(240)),
        });
        scenarios.push(Scenario {
            name: "Redlock soak: every fault, mixed".into(),
            redlock: true,
            broken: false,
            faults: REDLOCK_FAULTS.to_vec(),
            soak: Some(Duration::from_secs(90)),
        });
    }
    if let Ok(only) = std::env::var("REDMUTEX_CHAOS_ONLY") {
        scenarios.retain(|s| s.name.contains(&only));
    }
    for s in &scenarios {
        let out = run(s);
        println!("{:<52} {}", s.name, summary(&out.verdict));
        if std::env::var("REDMUTEX_CHAOS_VERBOSE").is_ok() {
            for n in out.verdict.notes.iter().take(10) {
                println!("    excused: {n}");
            }
            for e in &out.events {
                println!(
                    "    event {:?} {}..{} {:?}",
                    e.kind, e.start, e.end, e.victims
                );
            }
        }
        for v in out.verdict.violations.iter().take(10) {
            println!("    VIOLATION: {v}");
        }
        failed |= !out.verdict.violations.is_empty();
        totals.add(&out);
    }

    // The negative control: the same faults against a broken locker must
    // make the checker report violations.
    let mut control = 0;
    for kind in [Kind::PauseHolder, Kind::Del] {
        let s = Scenario {
            name: format!("negative control (broken locker): {}", kind.name()),
            broken: true,
            ..Scenario::one(kind)
        };
        let out = run(&s);
        let n = out.verdict.violations.len();
        println!("{:<52} {n} violations found (expected: some)", s.name);
        if let Some(v) = out.verdict.violations.first() {
            println!("    e.g. {v}");
        }
        if n == 0 {
            println!("    FAILED: the checker saw nothing wrong with a broken locker");
            failed = true;
        }
        control += n;
    }

    let report = totals.report(control, started.elapsed());
    println!("\n{report}");
    if let Ok(path) = std::env::var("REDMUTEX_CHAOS_REPORT") {
        std::fs::write(&path, &report).expect("write the report");
    }
    if failed {
        eprintln!("the fault suite found violations (see above)");
        std::process::exit(1);
    }
}

const REDLOCK_FAULTS: [Kind; 8] = [
    Kind::KillHolder,
    Kind::PauseHolder,
    Kind::PauseServer,
    Kind::Del,
    Kind::FlushAll,
    Kind::ScriptFlush,
    Kind::ClientKill,
    Kind::StarvePool,
];

struct Outcome {
    verdict: Verdict,
    events: Vec<Event>,
    processes: usize,
    rejected: u64,
    failures: BTreeMap<String, u64>,
}

#[derive(Default)]
struct Totals {
    acquisitions: u64,
    processes: usize,
    violations: usize,
    stale_accepted: u64,
    rejected: u64,
    excused: u64,
    max_takeover: Option<u64>,
    max_loss_report: Option<u64>,
    faults: BTreeMap<Kind, usize>,
    failures: BTreeMap<String, u64>,
}

impl Totals {
    fn add(&mut self, o: &Outcome) {
        self.acquisitions += o.verdict.acquisitions;
        self.processes += o.processes;
        self.violations += o.verdict.violations.len();
        self.stale_accepted += o.verdict.stale_accepted;
        self.rejected += o.rejected;
        self.excused += o.verdict.excused_overlaps;
        self.max_takeover = self.max_takeover.max(o.verdict.max_takeover);
        self.max_loss_report = self.max_loss_report.max(o.verdict.max_loss_report);
        for e in &o.events {
            *self.faults.entry(e.kind).or_default() += 1;
        }
        add_counts(&mut self.failures, &o.failures);
    }

    fn report(&self, control: usize, took: Duration) -> String {
        let opt = |v: Option<u64>| v.map_or("n/a".to_owned(), |t| format!("{:.0} ms", ms(t)));
        let mut s = String::new();
        s += "| figure | value |\n|---|---|\n";
        s += &format!("| acquisitions | {} |\n", self.acquisitions);
        s += &format!("| worker processes | {} |\n", self.processes);
        s += &format!("| violations | {} |\n", self.violations);
        s += &format!("| stale writes accepted | {} |\n", self.stale_accepted);
        s += &format!(
            "| stale reads and writes rejected by the fence | {} |\n",
            self.rejected
        );
        s += &format!(
            "| overlaps excused (holder told, fenced off) | {} |\n",
            self.excused
        );
        s += &format!(
            "| max takeover after a holder's kill | {} |\n",
            opt(self.max_takeover)
        );
        s += &format!(
            "| max loss-report latency | {} |\n",
            opt(self.max_loss_report)
        );
        s += &format!("| negative control violations | {control} |\n");
        s += &format!("| run time | {:.0} s |\n", took.as_secs_f64());
        s += "\n| fault | injected |\n|---|---|\n";
        for (k, n) in &self.faults {
            s += &format!("| {} | {n} |\n", k.name());
        }
        s += "\n| failed lock calls (bounded errors) | count |\n|---|---|\n";
        for (k, n) in &self.failures {
            s += &format!("| {k} | {n} |\n");
        }
        s
    }
}

struct Worker {
    id: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    /// When it was last told to starve its pool.
    starved: Option<Instant>,
}

/// One scenario's servers, workers and record of faults.
struct Run<'a> {
    scenario: &'a Scenario,
    servers: Vec<Server>,
    resource: Server,
    proxy: Option<Proxy>,
    dir: TempDir,
    workers: Vec<Worker>,
    next_id: u32,
    events: Vec<Event>,
    violations: Vec<String>,
    rng: Rng,
}

fn run(scenario: &Scenario) -> Outcome {
    let servers: Vec<Server> = (0..if scenario.redlock { 3 } else { 1 })
        .map(|_| Server::start())
        .collect();
    let proxy = (!scenario.redlock).then(|| Proxy::start(servers[0].port()));
    let mut r = Run {
        scenario,
        servers,
        resource: Server::start(),
        proxy,
        dir: TempDir::new("chaos"),
        workers: Vec::new(),
        next_id: 0,
        events: Vec::new(),
        violations: Vec::new(),
        rng: Rng::new(now_ns()),
    };
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
    fn lock_urls(&self) -> Vec<String> {
        match &self.proxy {
            Some(p) => vec![p.url()],
            None => self.servers.iter().map(Server::url).collect(),
        }
    }

    fn log_path(&self, id: u32) -> PathBuf {
        self.dir.0.join(format!("worker-{id}.log"))
    }

    fn spawn(&mut self) {
        let id = self.next_id;
        self.next_id += 1;
        let settings = Settings {
            id,
            lock_urls: self.lock_urls(),
            resource_url: self.resource.url(),
            out: self.log_path(id),
            ttl: TTL,
            io: IO,
            backoff_max: BACKOFF_MAX,
            broken: self.scenario.broken,
        };
        let child = Command::new(std::env::current_exe().expect("this binary"))
            .env(worker::ENV, settings.encode())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a worker process");
        let mut child = child;
        let stdin = child.stdin.take();
        self.workers.push(Worker {
            id,
            child,
            stdin,
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
                let v: Option<String> = redis::cmd("GET")
                    .arg(format!("{PREFIX}:{SLOW_KEY}"))
                    .query(&mut self.conn(i))
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

    fn inject(&mut self, kind: Kind) {
        let start = now_ns();
        let mut event = Event {
            kind,
            start,
            end: start,
            worker: None,
            victims: Vec::new(),
            loses: !self.scenario.redlock,
        };
        match kind {
            Kind::KillHolder => {
                let pos = self.holder();
                let mut w = self.workers.remove(pos);
                event.start = now_ns();
                w.child.kill().expect("kill -9 a worker");
                let _ = w.child.wait();
                event.worker = Some(w.id);
                self.spawn();
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
            Kind::PauseServer => {
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
                (event.start, event.victims) = self.tamper(action);
            }
            Kind::FlushAll => {
                // The keys go while the script runs: count from before it.
                event.start = now_ns();
                let values: Vec<(String, String)> = redis::Script::new(FLUSH_ALL)
                    .arg(format!("{PREFIX}:*"))
                    .invoke(&mut self.conn(0))
                    .expect("FLUSHALL");
                event.victims = values
                    .into_iter()
                    .filter_map(|(k, v)| Some((lock_name(&k)?, fence_in(&v)?)))
                    .collect();
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
                let proxy = self.proxy.as_ref().expect("a proxy in front of the server");
                proxy.set(mode);
                std::thread::sleep(hold);
                proxy.set(Mode::Pass);
            }
            Kind::StarvePool => {
                // One starving round at a time per worker: each can wait
                // seconds for the slow key.
                let now = Instant::now();
                let Some(w) = self.workers.iter_mut().find(|w| {
                    w.starved
                        .is_none_or(|t| now.duration_since(t) > Duration::from_secs(20))
                }) else {
                    return;
                };
                w.starved = Some(now);
                event.worker = Some(w.id);
                let stdin = w.stdin.as_mut().expect("a worker's stdin");
                stdin
                    .write_all(b"starve\n")
                    .expect("tell a worker to starve");
                stdin.flush().expect("flush");
                event.end = now_ns() + (TTL * 3).as_nanos() as u64;
            }
        }
        event.end = event.end.max(now_ns());
        self.events.push(event);
    }

    /// Takes the slow key away from its holder (`del`, `set`, `pexpire`),
    /// atomically with reading whose it was.
    /// Returns when it was sent (the key goes while it runs) and the victim.
    fn tamper(&mut self, action: &str) -> (u64, Vec<(String, u64)>) {
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
            if let Some(fence) = v.as_deref().and_then(fence_in) {
                return (sent, vec![(SLOW_KEY.to_owned(), fence)]);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        self.violations
            .push(format!("nobody held {SLOW_KEY} for 3 s (tamper {action})"));
        (now_ns(), Vec::new())
    }

    fn finish(mut self) -> Outcome {
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
                            self.violations
                                .push(format!("worker {} exited with {status}", w.id));
                        }
                        break;
                    }
                    _ if Instant::now() > give_up => {
                        self.violations
                            .push(format!("worker {} did not stop", w.id));
                        let _ = w.child.kill();
                        let _ = w.child.wait();
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
        // No lock key outlives its TTL (a killed holder's included).
        for i in 0..self.servers.len() {
            let mut c = self.conn(i);
            let give_up = Instant::now() + TTL + Duration::from_secs(3);
            let left = loop {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{PREFIX}:*"))
                    .query(&mut c)
                    .unwrap();
                let left: Vec<String> = keys
                    .into_iter()
                    .filter(|k| lock_name(k).is_some())
                    .collect();
                if left.is_empty() || Instant::now() > give_up {
                    break left;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            if !left.is_empty() {
                self.violations.push(format!(
                    "lock keys left on server {i} after the run: {left:?}"
                ));
            }
        }
        // The fenced counter lost no update.
        let mut rejected = 0;
        let mut res = self.resource.conn();
        for key in FAST_KEYS.iter().chain([&SLOW_KEY]) {
            let [_, count, stats] = resource_keys(key);
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
                self.violations.push(format!(
                    "{key}: counter {counter} after {} accepted increments: updates were lost",
                    accepted.unwrap_or(0)
                ));
            }
        }
        if let Ok(keep) = std::env::var("REDMUTEX_CHAOS_KEEP") {
            let to = PathBuf::from(keep).join(self.scenario.name.replace([' ', '/', ':'], "_"));
            std::fs::create_dir_all(&to).unwrap();
            for id in 0..self.next_id {
                let _ = std::fs::copy(self.log_path(id), to.join(format!("worker-{id}.log")));
            }
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
        let limits = Limits {
            ttl: nanos(TTL),
            renew: nanos(TTL / 3),
            op: nanos(op),
            backoff: nanos(BACKOFF_MAX),
            slack: nanos(SLACK),
        };
        let mut verdict = check(&logs, &self.events, &limits);
        verdict.violations.append(&mut self.violations);
        let mut failures = BTreeMap::new();
        for l in &logs {
            add_counts(&mut failures, &l.failures);
        }
        Outcome {
            verdict,
            events: self.events,
            processes,
            rejected,
            failures,
        }
    }
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
    (!name.starts_with("__redmutex__") && name != "broken-fence").then(|| name.to_owned())
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

/// Reads every key matching ARGV[1] with its value, then FLUSHALL.
const FLUSH_ALL: &str = r"
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local ok, v = pcall(redis.call, 'GET', k)
  if ok and v then table.insert(out, {k, v}) end
end
redis.call('FLUSHALL')
return out
";
