//! The election scenario: worker processes campaign for one election, lead
//! for a while (proclaiming, sometimes resigning) and record what they
//! believed; their leaders are killed, paused and partitioned; observers
//! (one of them behind a proxy that is partitioned too) record what they
//! yield. The checker holds the records to three rules:
//!
//! - *one-leader*: no two leaders believe they lead at once. A leader's
//!   belief is what a careful leader goes by, its lease's local deadline
//!   (`Leadership::guard().valid_until()`), ended early by its resignation;
//!   a later term's candidate must not have returned from `campaign`
//!   before an earlier term's belief ended. (A leader paused past its
//!   deadline is the documented limit: it must not act then, and its
//!   belief, the deadline, has passed.)
//! - *terms*: a campaign that returned before another began has the lower
//!   term.
//! - *observed*: each observer's sequence is consistent with the history:
//!   every leader it yields was granted that term with that value (the
//!   campaign's, or one proclaimed in it), terms never go back, no state is
//!   yielded twice in a row, every term granted is yielded (none skipped),
//!   and a leader that did not resign is followed by "no leader" before
//!   the next.
//!
//! Negative controls: workers that believe they lead until they notice
//! otherwise (`belief-until-noticed`) trip *one-leader* when paused; an
//! observer that polls `leader()` instead of following the log
//! (`polling-observer`) trips *observed*; and checker self-checks feed
//! *terms* and *observed* histories that break them.
//!
//! `REDMUTEX_CHAOS_ONLY=election cargo test --test chaos` runs it alone.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redmutex::{Backoff, Leader, Locker};
use redmutex_testkit::proxy::{Mode, Proxy};

use crate::common::{Server, TempDir};
use crate::history::{now_ns, MS};
use crate::worker::Rng;

/// With this set, the binary runs one election worker:
/// `<id> <url> <records file> <flaw>`.
pub const ENV: &str = "REDMUTEX_CHAOS_ELECTION_WORKER";

const TTL: Duration = Duration::from_millis(1000);
const IO: Duration = Duration::from_millis(200);
const NAME: &str = "chaos-election";
const WORKERS: usize = 3;
/// How long a paused or partitioned leader stays so: past its lease.
const OUTAGE: Duration = Duration::from_millis(1500);
/// Time given to the system after each fault.
const GAP: Duration = Duration::from_millis(2500);

/// What a scenario breaks on purpose (a negative control), if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    None,
    /// Workers believe they lead until they notice they do not.
    BeliefUntilNoticed,
    /// The observers poll `leader()` every 200 ms instead of following the log.
    PollingObserver,
}

impl Flaw {
    fn code(self) -> &'static str {
        match self {
            Flaw::None => "none",
            Flaw::BeliefUntilNoticed => "belief-until-noticed",
            Flaw::PollingObserver => "polling-observer",
        }
    }

    fn parse(s: &str) -> Flaw {
        match s {
            "belief-until-noticed" => Flaw::BeliefUntilNoticed,
            "polling-observer" => Flaw::PollingObserver,
            _ => Flaw::None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Pause,
    Partition,
}

pub mod rule {
    pub const ONE_LEADER: &str = "one-leader";
    pub const TERMS: &str = "terms";
    pub const OBSERVED: &str = "observed";
}

fn locker(url: &str) -> Locker {
    Locker::builder(redmutex::pool(url).unwrap())
        .ttl(TTL)
        .io_timeout(IO)
        .checkout_timeout(IO)
        .backoff(Backoff::exponential(
            Duration::from_millis(10),
            Duration::from_millis(100),
        ))
        .build()
        .unwrap()
}

/// `until` (an `Instant`) on the monotonic clock of `now_ns`.
fn ns_of(until: Instant) -> u64 {
    let (i0, n0) = (Instant::now(), now_ns());
    if until >= i0 {
        n0 + u64::try_from((until - i0).as_nanos()).unwrap_or(u64::MAX / 2)
    } else {
        n0.saturating_sub(u64::try_from((i0 - until).as_nanos()).unwrap_or(0))
    }
}

/// One worker process: campaigns, leads a while, records what it believed.
pub fn worker_main(spec: &str) {
    let parts: Vec<&str> = spec.splitn(4, ' ').collect();
    let [id, url, path, flaw] = parts.as_slice() else {
        panic!("bad worker spec {spec:?}");
    };
    let flaw = Flaw::parse(flaw);
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let mut record = |line: String| {
        out.write_all(format!("{line}\n").as_bytes()).unwrap();
        out.flush().unwrap();
    };
    let election = locker(url).election(NAME).unwrap();
    let mut rng = Rng::new(now_ns() ^ u64::from(std::process::id()));
    let pause = mpsc::channel::<()>();
    loop {
        let start = now_ns();
        let l = match election.campaign_timeout(format!("w{id}"), Duration::from_secs(30)) {
            Ok(l) => l,
            Err(e) => {
                record(format!("error {}", e.to_string().replace(' ', "_")));
                let _ = pause.1.recv_timeout(Duration::from_millis(50));
                continue;
            }
        };
        let term = l.term();
        record(format!("grant {term} {start} {}", now_ns()));
        if l.proclaim(format!("w{id}@{term}")).is_ok() {
            record(format!("proclaim {term} w{id}@{term}"));
        }
        loop {
            let until = l.guard().valid_until();
            let lost = l.is_lost();
            let believed = match flaw {
                Flaw::BeliefUntilNoticed => now_ns(),
                _ => ns_of(until),
            };
            record(format!("belief {term} {believed}"));
            if lost {
                record(format!("lost {term} {}", now_ns()));
                break;
            }
            // Resign now and then: some leaderships are short.
            if rng.below(20) == 0 {
                record(format!("resign {term} {}", now_ns()));
                let _ = l.resign();
                break;
            }
            l.wait_lost(Duration::from_millis(50));
        }
    }
}

/// What one worker recorded of one term.
#[derive(Debug, Clone, Default)]
struct Term {
    worker: usize,
    /// When its campaign began and returned.
    start: u64,
    end_campaign: u64,
    /// The latest its belief reached, and when it resigned, if it did.
    believed: u64,
    resigned: Option<u64>,
    values: Vec<String>,
}

impl Term {
    fn belief_end(&self) -> u64 {
        self.resigned
            .map_or(self.believed, |r| r.min(self.believed))
    }
}

/// Every term the workers recorded, by term.
fn read_terms(dir: &Path) -> BTreeMap<u64, Term> {
    let mut terms: BTreeMap<u64, Term> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(worker) = worker_of(&path) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let term = |i: usize| f.get(i).and_then(|t| t.parse::<u64>().ok());
            match (f.first().copied(), term(1)) {
                (Some("grant"), Some(t)) => {
                    let e = terms.entry(t).or_default();
                    e.worker = worker;
                    e.start = term(2).unwrap_or(0);
                    e.end_campaign = term(3).unwrap_or(0);
                    e.values.push(format!("w{worker}"));
                }
                (Some("proclaim"), Some(t)) => {
                    if let Some(v) = f.get(2) {
                        terms.entry(t).or_default().values.push((*v).to_owned());
                    }
                }
                (Some("belief"), Some(t)) => {
                    let e = terms.entry(t).or_default();
                    e.believed = e.believed.max(term(2).unwrap_or(0));
                }
                (Some("resign"), Some(t)) => {
                    terms.entry(t).or_default().resigned = term(2);
                }
                _ => {}
            }
        }
    }
    terms
}

/// The worker id of a records file `w<id>-<n>.log`.
fn worker_of(path: &Path) -> Option<usize> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix('w')?.split('-').next()?.parse().ok()
}

/// One observer's sequence: when, and what it yielded.
type Seen = Vec<(u64, Option<(u64, String)>)>;

/// The violations of the three rules, as `(rule, text)`.
fn check(terms: &BTreeMap<u64, Term>, observers: &[Seen]) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    let list: Vec<(&u64, &Term)> = terms.iter().filter(|(_, t)| t.end_campaign > 0).collect();
    for (i, (ta, a)) in list.iter().enumerate() {
        for (tb, b) in &list[i + 1..] {
            if b.end_campaign < a.belief_end() {
                v.push((
                    rule::ONE_LEADER,
                    format!(
                        "term {tb} (w{}) led {:.1} ms before term {ta} (w{}) stopped believing it led",
                        b.worker,
                        (a.belief_end() - b.end_campaign) as f64 / MS as f64,
                        a.worker
                    ),
                ));
            }
            if b.end_campaign < a.start {
                v.push((
                    rule::TERMS,
                    format!(
                        "term {tb} (w{}) returned before term {ta} (w{}) began its campaign",
                        b.worker, a.worker
                    ),
                ));
            }
        }
    }
    for (n, seen) in observers.iter().enumerate() {
        let mut last: Option<&Option<(u64, String)>> = None;
        let mut top = 0;
        let mut yielded: HashMap<u64, ()> = HashMap::new();
        for (_, s) in seen {
            if last == Some(s) {
                v.push((
                    rule::OBSERVED,
                    format!("observer {n} yielded {s:?} twice in a row"),
                ));
            }
            if let Some((term, value)) = s {
                match terms.get(term) {
                    Some(t) if t.values.contains(value) => {}
                    _ => v.push((
                        rule::OBSERVED,
                        format!(
                            "observer {n} yielded term {term} with {value:?}, never granted so"
                        ),
                    )),
                }
                if *term < top {
                    v.push((
                        rule::OBSERVED,
                        format!("observer {n} went back from term {top} to {term}"),
                    ));
                }
                // A leader that did not resign is followed by "no leader".
                if let Some(Some((prev, _))) = last {
                    if prev != term && terms.get(prev).is_some_and(|t| t.resigned.is_none()) {
                        v.push((
                            rule::OBSERVED,
                            format!(
                                "observer {n} went from term {prev}, which did not resign, \
                                 to {term} with no \"no leader\" between"
                            ),
                        ));
                    }
                }
                top = top.max(*term);
                yielded.insert(*term, ());
            }
            last = Some(s);
        }
        for (term, t) in &list {
            if !yielded.contains_key(term) {
                v.push((
                    rule::OBSERVED,
                    format!("observer {n} skipped term {term} (w{})", t.worker),
                ));
            }
        }
    }
    v
}

/// A worker process and its proxy.
struct Worker {
    child: Child,
    proxy: Proxy,
    incarnation: u32,
}

fn spawn_worker(id: usize, n: u32, proxy: &Proxy, dir: &Path, flaw: Flaw) -> Child {
    let path = dir.join(format!("w{id}-{n}.log"));
    Command::new(std::env::current_exe().unwrap())
        .env(
            ENV,
            format!("{id} {} {} {}", proxy.url(), path.display(), flaw.code()),
        )
        .spawn()
        .unwrap()
}

/// Runs the scenario with `faults`; returns the violations and how many
/// terms were granted.
fn run(flaw: Flaw, faults: &[Fault]) -> (Vec<(&'static str, String)>, usize) {
    let server = Server::start();
    let dir = TempDir::new("chaos-election");
    let direct = locker(&server.url());
    let election = direct.election(NAME).unwrap();
    // Observers: one direct, one behind a proxy partitioned with the leader.
    let observer_proxy = Proxy::start(server.port());
    let stop = Arc::new(AtomicBool::new(false));
    let mut observers = Vec::new();
    for url in [server.url(), observer_proxy.url()] {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let (seen2, stop2) = (Arc::clone(&seen), Arc::clone(&stop));
        let e = locker(&url).election(NAME).unwrap();
        thread::Builder::new()
            .spawn(move || follow(&e, flaw, &seen2, &stop2))
            .unwrap();
        observers.push(seen);
    }
    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|id| {
            let proxy = Proxy::start(server.port());
            let child = spawn_worker(id, 0, &proxy, &dir.0, flaw);
            Worker {
                child,
                proxy,
                incarnation: 0,
            }
        })
        .collect();
    let pause = mpsc::channel::<()>();
    let wait = |d: Duration| {
        let _ = pause.1.recv_timeout(d);
    };
    wait(GAP);
    for fault in faults {
        // The leader now, once it has recorded its grant.
        let Some(id) = leader_worker(&election, &dir.0) else {
            continue;
        };
        let w = &mut workers[id];
        let pid = Pid::from_raw(i32::try_from(w.child.id()).unwrap());
        match fault {
            Fault::Kill => {
                let _ = w.child.kill();
                let _ = w.child.wait();
                w.incarnation += 1;
                w.child = spawn_worker(id, w.incarnation, &w.proxy, &dir.0, flaw);
            }
            Fault::Pause => {
                kill(pid, Signal::SIGSTOP).unwrap();
                wait(OUTAGE);
                kill(pid, Signal::SIGCONT).unwrap();
            }
            Fault::Partition => {
                w.proxy.set(Mode::Blackhole);
                observer_proxy.set(Mode::Blackhole);
                wait(OUTAGE);
                w.proxy.set(Mode::Pass);
                observer_proxy.set(Mode::Pass);
            }
        }
        wait(GAP);
    }
    for w in &mut workers {
        let _ = w.child.kill();
        let _ = w.child.wait();
    }
    // Every observer ends on "no leader" once the last lease runs out.
    let deadline = Instant::now() + TTL * 6;
    while Instant::now() < deadline
        && !observers
            .iter()
            .all(|o| o.lock().unwrap().last().is_some_and(|(_, s)| s.is_none()))
    {
        wait(Duration::from_millis(50));
    }
    wait(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    let terms = read_terms(&dir.0);
    let seen: Vec<Seen> = observers
        .iter()
        .map(|o| o.lock().unwrap().clone())
        .collect();
    let granted = terms.values().filter(|t| t.end_campaign > 0).count();
    (check(&terms, &seen), granted)
}

/// The id of the worker that leads now, once its grant is recorded.
fn leader_worker(election: &redmutex::Election, dir: &Path) -> Option<usize> {
    let deadline = Instant::now() + TTL * 3;
    let pause = mpsc::channel::<()>();
    while Instant::now() < deadline {
        if let Ok(Some(l)) = election.leader() {
            let terms = read_terms(dir);
            if let Some(t) = terms.get(&l.term()).filter(|t| t.end_campaign > 0) {
                return Some(t.worker);
            }
        }
        let _ = pause.1.recv_timeout(Duration::from_millis(20));
    }
    None
}

/// An observer's thread: records what it yields until told to stop.
fn follow(e: &redmutex::Election, flaw: Flaw, seen: &Mutex<Seen>, stop: &AtomicBool) {
    let as_seen = |l: Option<Leader>| l.map(|l| (l.term(), l.value().to_owned()));
    if flaw == Flaw::PollingObserver {
        let pause = mpsc::channel::<()>();
        let mut last = None;
        while !stop.load(Ordering::SeqCst) {
            if let Ok(l) = e.leader() {
                let s = as_seen(l);
                if seen.lock().unwrap().is_empty() || s != last {
                    seen.lock().unwrap().push((now_ns(), s.clone()));
                    last = s;
                }
            }
            let _ = pause.1.recv_timeout(Duration::from_millis(200));
        }
        return;
    }
    let mut observer = loop {
        match e.observe() {
            Ok(o) => break o,
            Err(_) if !stop.load(Ordering::SeqCst) => continue,
            Err(_) => return,
        }
    };
    while !stop.load(Ordering::SeqCst) {
        if let Some(Ok(l)) = observer.next() {
            seen.lock().unwrap().push((now_ns(), as_seen(l)));
        }
    }
}

/// The scenario and its negative controls; false when something failed.
pub fn scenarios(only: Option<&str>) -> (usize, bool) {
    let mut ran = 0;
    let mut ok = true;
    let wanted = |name: &str| {
        only.is_none_or(|o| {
            name.contains(o) || (o.contains("control") && name.starts_with("negative control"))
        })
    };
    let name = "election: leaders killed, paused, partitioned";
    if wanted(name) {
        let (violations, granted) = run(
            Flaw::None,
            &[Fault::Kill, Fault::Pause, Fault::Partition, Fault::Kill],
        );
        println!(
            "{name:<52} {granted} terms, {} violations",
            violations.len()
        );
        for (r, text) in violations.iter().take(10) {
            println!("    VIOLATION [{r}]: {text}");
        }
        ok &= violations.is_empty() && granted > 4;
        ran += 1;
    }
    for (flaw, faults, expected) in [
        (
            Flaw::BeliefUntilNoticed,
            &[Fault::Pause, Fault::Pause][..],
            rule::ONE_LEADER,
        ),
        (
            Flaw::PollingObserver,
            &[Fault::Kill, Fault::Pause][..],
            rule::OBSERVED,
        ),
    ] {
        let name = format!("negative control: election {}", flaw.code());
        if !wanted(&name) {
            continue;
        }
        let (violations, _) = run(flaw, faults);
        let tripped = violations.iter().filter(|(r, _)| *r == expected).count();
        println!(
            "{name:<52} {tripped} [{expected}] violations, {} in all (expected: some [{expected}])",
            violations.len()
        );
        if let Some((_, text)) = violations.iter().find(|(r, _)| *r == expected) {
            println!("    e.g. {text}");
        }
        if tripped == 0 {
            println!("    FAILED: the [{expected}] rule saw nothing wrong");
            ok = false;
        }
        ran += 1;
    }
    (ran, ok)
}

/// The checker's self-checks: histories that break *terms* and *observed*
/// are caught, and a clean one is not.
pub fn checker_self_checks() {
    let term = |worker, start, end_campaign, believed, resigned: Option<u64>| Term {
        worker,
        start,
        end_campaign,
        believed,
        resigned,
        values: vec![format!("w{worker}")],
    };
    let mut terms = BTreeMap::new();
    terms.insert(10, term(0, 0, 10 * MS, 100 * MS, Some(50 * MS)));
    terms.insert(20, term(1, 20 * MS, 60 * MS, 200 * MS, None));
    let clean: Seen = vec![
        (0, None),
        (1, Some((10, "w0".into()))),
        (2, Some((20, "w1".into()))),
        (3, None),
    ];
    assert!(
        check(&terms, std::slice::from_ref(&clean)).is_empty(),
        "a clean history"
    );
    // A lower term that returned after a higher one began and ended.
    let mut backwards = terms.clone();
    backwards.insert(5, term(2, 300 * MS, 310 * MS, 320 * MS, Some(315 * MS)));
    assert!(check(&backwards, &[])
        .iter()
        .any(|(r, _)| *r == rule::TERMS));
    // Skipped, repeated, unknown, gone back, no "no leader" after a loss.
    let bad: [Seen; 4] = [
        vec![(0, None), (1, Some((20, "w1".into()))), (2, None)],
        vec![
            (0, None),
            (1, Some((10, "w0".into()))),
            (1, Some((10, "w0".into()))),
            (2, Some((20, "w1".into()))),
        ],
        vec![(0, Some((10, "w9".into()))), (1, Some((20, "w1".into())))],
        vec![(0, Some((20, "w1".into()))), (1, Some((10, "w0".into())))],
    ];
    for seen in bad {
        assert!(
            check(&terms, std::slice::from_ref(&seen))
                .iter()
                .any(|(r, _)| *r == rule::OBSERVED),
            "{seen:?}"
        );
    }
    terms.get_mut(&10).unwrap().resigned = None;
    assert!(check(&terms, &[clean])
        .iter()
        .any(|(r, _)| *r == rule::OBSERVED));
}
