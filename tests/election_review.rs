//! A hostile review of the election (issue 34): what a leader is told when
//! Redis says it no longer leads, and what observers agree on when a
//! candidate handed the lead never takes it up.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use common::{key, Server};
use redmutex::{Error, LeaseState};

/// The election key of `name` (a locker without a prefix).
fn election_key(name: &str) -> String {
    format!("__redmutex__:election:{name}")
}

#[test]
fn a_proclaim_that_finds_the_lead_gone_tells_the_leadership_it_is_lost() {
    let server = Server::start();
    let name = key("proclaim-lost");
    // The default lease (30 s, renewed every 10 s): nothing but the
    // proclaim's answer can tell the leader before its next renewal.
    let leadership = server
        .locker()
        .election(&name)
        .unwrap()
        .campaign("old")
        .unwrap();
    // Unseated (an operator, a failover that lost the key), and another
    // candidate leads now.
    let _: () = redis::cmd("DEL")
        .arg(election_key(&name))
        .query(&mut server.conn())
        .unwrap();
    let new = server
        .locker()
        .election(&name)
        .unwrap()
        .campaign("new")
        .unwrap();
    assert!(matches!(
        leadership.proclaim("stale"),
        Err(Error::Lost { .. })
    ));
    // Redis said the lead is someone else's: the leadership must say so
    // too, at once, not at its next renewal.
    assert_eq!(leadership.state(), LeaseState::Lost);
    assert!(leadership.is_lost());
    assert!(matches!(
        leadership.guard().ensure_held(),
        Err(Error::Lost { .. })
    ));
    new.resign().unwrap();
}

/// `(term, value)` of each state an observer yields, or `None`.
type Seen = Option<(u64, String)>;

fn seen(l: &Option<redmutex::Leader>) -> Seen {
    l.as_ref().map(|l| (l.term(), l.value().to_owned()))
}

/// What a candidate killed while queued for the election `name` leaves
/// behind: its entry at the head of the queue (as `join.lua` writes it,
/// arrived now by the server's clock, staying `stay_ms`), its owner token
/// 32 hex digits as the library's are.
fn plant_killed_candidate(server: &Server, name: &str, stay_ms: u64) {
    let mut c = server.conn();
    let (secs, micros): (String, String) = redis::cmd("TIME").query(&mut c).unwrap();
    let now_ms = secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000;
    let token = "0123456789abcdef0123456789abcdef";
    let _: () = redis::cmd("ZADD")
        .arg(format!("__redmutex__:election-queue:{name}"))
        .arg(1)
        .arg(token)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("__redmutex__:election-waiters:{name}"))
        .arg(token)
        .arg(format!("{now_ms}:{stay_ms}:30000:ghost"))
        .query(&mut c)
        .unwrap();
}

/// Follows `observer` on a thread of its own: each state it yields comes
/// down the returned channel, so a test waits for one with a bound.
fn follow(mut observer: redmutex::Observer) -> std::sync::mpsc::Receiver<Seen> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .spawn(move || {
            for change in observer.by_ref() {
                if tx.send(seen(&change.unwrap())).is_err() {
                    break;
                }
            }
        })
        .unwrap();
    rx
}

#[test]
fn observers_agree_when_a_candidate_handed_the_lead_never_takes_it_up() {
    use std::time::Duration;
    let server = Server::start();
    let name = key("ghost");
    let locker = server.locker();
    let election = locker.election(&name).unwrap();
    // A live observer, which follows each change as it comes, and one made
    // at the same time but read only at the end, from the log.
    let live = follow(election.observe().unwrap());
    let late = election.observe().unwrap();
    let long = Duration::from_secs(20);
    assert_eq!(live.recv_timeout(long).unwrap(), None);
    let a = election.campaign("a").unwrap();
    let term_a = a.term();
    assert_eq!(live.recv_timeout(long).unwrap(), Some((term_a, "a".into())));
    // A candidate that was killed while queued is first in line: the
    // resignation hands it the lead, which it never takes up; its claim
    // runs out within its stay.
    plant_killed_candidate(&server, &name, 500);
    a.resign().unwrap();
    // The live observer sees the election without a leader.
    assert_eq!(live.recv_timeout(long).unwrap(), None);
    // Then another candidate leads, and resigns.
    let c = election.campaign("c").unwrap();
    let term_c = c.term();
    assert_eq!(live.recv_timeout(long).unwrap(), Some((term_c, "c".into())));
    c.resign().unwrap();
    assert_eq!(live.recv_timeout(long).unwrap(), None);
    // The observer that reads the log afterwards must yield the same
    // changes, in the same order: "every observer yields the same changes
    // in the same order" (the Observer docs).
    let late = follow(late);
    let read_late: Vec<Seen> = (0..5)
        .map_while(|_| late.recv_timeout(Duration::from_secs(5)).ok())
        .collect();
    assert_eq!(
        read_late,
        vec![
            None,
            Some((term_a, "a".into())),
            None,
            Some((term_c, "c".into())),
            None,
        ]
    );
}

/// Every event logged in this test binary: (target, level, message).
static EVENTS: std::sync::Mutex<Vec<(String, log::Level, String)>> =
    std::sync::Mutex::new(Vec::new());

struct Catch;

impl log::Log for Catch {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        EVENTS.lock().unwrap().push((
            record.target().to_owned(),
            record.level(),
            record.args().to_string(),
        ));
    }
    fn flush(&self) {}
}

static LOGGER: Catch = Catch;

#[test]
fn an_observer_that_began_on_an_empty_log_and_fell_behind_says_so() {
    // Several tests run in one binary: the first one installs the logger.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Trace);
    let server = Server::start();
    let name = key("behind-from-the-start");
    let election = server.locker().election(&name).unwrap();
    // Made before any change: the election's log does not exist yet.
    let mut observer = election.observe().unwrap();
    assert_eq!(seen(&observer.next().unwrap().unwrap()), None);
    // 201 changes while it reads nothing: the log keeps the latest 128.
    let leadership = election.campaign("v0").unwrap();
    for i in 1..=200 {
        leadership.proclaim(format!("v{i}")).unwrap();
    }
    let first = seen(&observer.next().unwrap().unwrap());
    assert_eq!(
        first,
        Some((leadership.term(), "v73".into())),
        "the oldest kept"
    );
    // It skipped 73 changes: the Observer docs promise a `warn` (target
    // `redmutex::observe`) when an observer more than 128 changes behind
    // skips some.
    let warned = EVENTS
        .lock()
        .unwrap()
        .iter()
        .any(|(target, level, message)| {
            target == "redmutex::observe" && *level == log::Level::Warn && message.contains(&name)
        });
    assert!(warned, "73 changes skipped without a warning");
    leadership.resign().unwrap();
}

#[test]
fn a_leader_that_outlived_the_log_and_died_is_followed_by_no_leader_in_the_log() {
    use std::time::Duration;
    const TTL: Duration = Duration::from_secs(1);
    let server = Server::start();
    let name = key("outlived");
    // A leader that dies: no watchdog renews it, and it never resigns.
    let dead = server.builder().ttl(TTL).watchdog(false).build().unwrap();
    let leadership = dead.election(&name).unwrap().campaign("dead").unwrap();
    let term_dead = leadership.term();
    std::mem::forget(leadership);
    // An observer made while it leads, read later (it yields the leader
    // first, from the election's key).
    let next = server.locker();
    let late = next.election(&name).unwrap().observe().unwrap();
    // A leader commonly leads longer than the log is kept (a day after its
    // last change): the log is gone, as its expiry leaves it.
    let _: () = redis::cmd("DEL")
        .arg(format!("__redmutex__:election-log:{name}"))
        .query(&mut server.conn())
        .unwrap();
    // It dies: its lease runs out, and another candidate leads.
    common::wait_until(
        "the dead leader's lease runs out",
        Duration::from_secs(20),
        || {
            !redis::cmd("EXISTS")
                .arg(election_key(&name))
                .query::<bool>(&mut server.conn())
                .unwrap()
        },
    );
    let took = next.election(&name).unwrap().campaign("next").unwrap();
    let term_next = took.term();
    // "A lease that runs out ... is logged before the next leader by that
    // leader's announcement" (RELIABILITY.md): the observer that reads the
    // log now yields "no leader" between the two, as a live one did.
    let late = follow(late);
    let read: Vec<Seen> = (0..3)
        .map_while(|_| late.recv_timeout(Duration::from_secs(5)).ok())
        .collect();
    assert_eq!(
        read,
        vec![
            Some((term_dead, "dead".into())),
            None,
            Some((term_next, "next".into())),
        ]
    );
    took.resign().unwrap();
}

#[test]
fn with_min_replicas_a_proclaim_the_replicas_miss_fails_not_replicated() {
    use std::time::Duration;
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let locker = master
        .builder()
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let name = key("replicated");
    let election = locker.election(&name).unwrap();
    // The grant is acknowledged by the replica (min_replicas).
    let leadership = election.campaign("a").unwrap();
    replica.pause(); // it can no longer acknowledge anything
    let proclaimed = leadership.proclaim("b");
    replica.resume();
    // The lock survives a failover to the replica; the value proclaimed
    // (and its log entry, which observers follow) would not: the leader
    // must not be told it was proclaimed, as a guarded write is not
    // (`Guard::run_if_held`: `NotReplicated`, the writes ran on the
    // master).
    match proclaimed {
        Err(Error::NotReplicated { acked, needed }) => assert_eq!((acked, needed), (0, 1)),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    leadership.resign().unwrap();
}

#[test]
fn observers_agree_when_the_candidate_handed_the_lead_takes_it_after_its_claim() {
    use redmutex_testkit::proxy::{Mode, Proxy};
    use std::time::Duration;
    let server = Server::start();
    let name = key("late-take-up");
    let direct = server.locker();
    let election = direct.election(&name).unwrap();
    let live = follow(election.observe().unwrap());
    let late = election.observe().unwrap();
    let long = Duration::from_secs(20);
    assert_eq!(live.recv_timeout(long).unwrap(), None);
    let a = election.campaign("a").unwrap();
    let term_a = a.term();
    assert_eq!(live.recv_timeout(long).unwrap(), Some((term_a, "a".into())));
    // A candidate behind a proxy, with a 1 s lease (its claim, once handed
    // the lead) and a backoff of 10 s: only the hand-over makes it try.
    let proxy = Proxy::start(server.port());
    let b_locker = redmutex::Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .ttl(Duration::from_secs(1))
        .backoff(redmutex::Backoff::fixed(Duration::from_secs(10)))
        .build()
        .unwrap();
    let b_election = b_locker.election(&name).unwrap();
    let b = std::thread::Builder::new()
        .spawn(move || {
            let l = b_election
                .campaign_timeout("b", Duration::from_secs(60))
                .unwrap();
            let term = l.term();
            l.resign().unwrap();
            term
        })
        .unwrap();
    common::wait_until("b is queued", long, || {
        redis::cmd("ZCARD")
            .arg(format!("__redmutex__:election-queue:{name}"))
            .query::<u64>(&mut server.conn())
            .unwrap()
            == 1
    });
    // The candidate stalls (a paused process, a slow network): the
    // resignation hands it the lead, and its claim runs out before it hears.
    proxy.set(Mode::StallExisting);
    a.resign().unwrap();
    assert_eq!(live.recv_timeout(long).unwrap(), None, "the claim ran out");
    // It comes back, and leads.
    proxy.set(Mode::Pass);
    let term_b = b.join().unwrap();
    assert_eq!(live.recv_timeout(long).unwrap(), Some((term_b, "b".into())));
    assert_eq!(live.recv_timeout(long).unwrap(), None);
    // The observer that reads the log afterwards yields the same changes.
    let late = follow(late);
    let read_late: Vec<Seen> = (0..5)
        .map_while(|_| late.recv_timeout(Duration::from_secs(5)).ok())
        .collect();
    assert_eq!(
        read_late,
        vec![
            None,
            Some((term_a, "a".into())),
            None,
            Some((term_b, "b".into())),
            None,
        ]
    );
}
