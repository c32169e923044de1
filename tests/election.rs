//! Leader election: one leader at a time, observers that see every change
//! in order, a dead leader replaced within its lease, a resignation that
//! hands over at once, a lost leader that cannot proclaim.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::{key, Cluster, Server};
use redmutex::{Backoff, Error, Leader, Locker};

const LONG: Duration = Duration::from_secs(20);

/// `(term, value)` of each state an observer yields, or `None`.
type Seen = Option<(u64, String)>;

fn seen(l: &Option<Leader>) -> Seen {
    l.as_ref().map(|l| (l.term(), l.value().to_owned()))
}

/// Starts an observer of `name` on another thread, which collects its
/// first `n` states.
fn observer(locker: &Locker, name: &str, n: usize) -> JoinHandle<Vec<Seen>> {
    let mut observer = locker.election(name).unwrap().observe().unwrap();
    thread::Builder::new()
        .spawn(move || {
            (0..n)
                .map(|_| seen(&observer.next().unwrap().unwrap()))
                .collect()
        })
        .unwrap()
}

/// How many candidates are queued for the election `name` (no prefix).
fn queued(server: &Server, name: &str) -> u64 {
    redis::cmd("ZCARD")
        .arg(format!("__redmutex__:election-queue:{name}"))
        .query(&mut server.conn())
        .unwrap()
}

fn log_len(server: &Server, name: &str) -> u64 {
    redis::cmd("XLEN")
        .arg(format!("__redmutex__:election-log:{name}"))
        .query(&mut server.conn())
        .unwrap()
}

#[test]
fn one_leader_at_a_time_among_contending_candidates() {
    let server = Server::start();
    let name = key("contended");
    let inside = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let election = server.locker().election(&name).unwrap();
            let (inside, terms) = (Arc::clone(&inside), Arc::clone(&terms));
            thread::Builder::new()
                .spawn(move || {
                    for round in 0..5 {
                        election
                            .lead(format!("worker-{w}-{round}"), |leadership| {
                                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                                terms.lock().unwrap().push(leadership.term());
                                // Lead for a moment (the lease is not lost meanwhile).
                                assert!(!leadership.wait_lost(Duration::from_millis(5)));
                                inside.fetch_sub(1, Ordering::SeqCst);
                            })
                            .unwrap();
                    }
                })
                .unwrap()
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let terms = terms.lock().unwrap();
    assert_eq!(terms.len(), 20);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms must rise: {terms:?}"
    );
}

#[test]
fn leader_reports_value_term_and_ttl() {
    let server = Server::start();
    let name = key("leader");
    let election = server.locker().election(&name).unwrap();
    assert_eq!(election.leader().unwrap(), None);
    let leadership = election.campaign("10.0.0.7:8080").unwrap();
    let leader = election.leader().unwrap().unwrap();
    assert_eq!(leader.value(), "10.0.0.7:8080");
    assert_eq!(leader.term(), leadership.term());
    assert!(leader.ttl() > Duration::from_secs(20) && leader.ttl() <= Duration::from_secs(30));
    // A value with colons and newlines is kept as it is.
    leadership.proclaim("a:b\nc").unwrap();
    assert_eq!(election.leader().unwrap().unwrap().value(), "a:b\nc");
    // Nobody else can lead meanwhile.
    assert!(server
        .locker()
        .election(&name)
        .unwrap()
        .try_campaign("other")
        .unwrap()
        .is_none());
    leadership.resign().unwrap();
    assert_eq!(election.leader().unwrap(), None);
}

#[test]
fn observers_see_every_change_in_order() {
    let server = Server::start();
    let name = key("observed");
    let (a, b) = (server.locker(), server.locker());
    // Two live observers, started before any change.
    let live = [observer(&a, &name, 5), observer(&b, &name, 5)];
    // One made now but read only after every change: it reads the log.
    let mut late = a.election(&name).unwrap().observe().unwrap();
    let leadership = a.election(&name).unwrap().campaign("a1").unwrap();
    let term_a = leadership.term();
    leadership.proclaim("a2").unwrap();
    let candidate = {
        let election = b.election(&name).unwrap();
        thread::Builder::new()
            .spawn(move || {
                let l = election.campaign_timeout("b", LONG).unwrap();
                let term = l.term();
                l.resign().unwrap();
                term
            })
            .unwrap()
    };
    common::wait_until("b is queued", LONG, || queued(&server, &name) == 1);
    leadership.resign().unwrap();
    let term_b = candidate.join().unwrap();
    assert!(term_b > term_a);
    let expected: Vec<Seen> = vec![
        None,
        Some((term_a, "a1".into())),
        Some((term_a, "a2".into())),
        Some((term_b, "b".into())),
        None,
    ];
    for o in live {
        assert_eq!(o.join().unwrap(), expected);
    }
    // The log holds the same history for an observer that reads it later.
    let read_late: Vec<Seen> = (0..5)
        .map(|_| seen(&late.next().unwrap().unwrap()))
        .collect();
    assert_eq!(read_late, expected);
}

#[test]
fn a_killed_leader_is_replaced_within_its_ttl() {
    const TTL: Duration = Duration::from_secs(1);
    let server = Server::start();
    let name = key("killed");
    // A leader that dies: no watchdog renews it, and it never resigns.
    let dead = server.builder().ttl(TTL).watchdog(false).build().unwrap();
    let next = server.locker_with_ttl(TTL);
    let watching = observer(&next, &name, 4);
    let leadership = dead.election(&name).unwrap().campaign("dead").unwrap();
    let term_dead = leadership.term();
    let died = Instant::now();
    std::mem::forget(leadership);
    let took = next
        .election(&name)
        .unwrap()
        .campaign_timeout("next", LONG)
        .unwrap();
    // Within its TTL, plus a backoff pause (256 ms) and slack for a
    // loaded machine.
    let waited = died.elapsed();
    assert!(waited < TTL + Duration::from_secs(2), "{waited:?}");
    assert!(took.term() > term_dead);
    let term_next = took.term();
    took.resign().unwrap();
    assert_eq!(
        watching.join().unwrap(),
        vec![
            None,
            Some((term_dead, "dead".into())),
            None,
            Some((term_next, "next".into())),
        ]
    );
}

#[test]
fn resign_hands_over_at_once() {
    let server = Server::start();
    let name = key("handover");
    // Candidates that would retry only every 10 s, in two lockers built
    // apart (as two processes): only the hand-over can be quick.
    let slow = || {
        server
            .builder()
            .backoff(Backoff::fixed(Duration::from_secs(10)))
            .build()
            .unwrap()
    };
    let (a, b) = (slow(), slow());
    let leadership = a.election(&name).unwrap().campaign("a").unwrap();
    let election = b.election(&name).unwrap();
    let candidate = thread::Builder::new()
        .spawn(move || {
            let l = election.campaign_timeout("b", LONG).unwrap();
            (Instant::now(), l)
        })
        .unwrap();
    common::wait_until("b is queued", LONG, || queued(&server, &name) == 1);
    let resigned = Instant::now();
    leadership.resign().unwrap();
    let (led, l) = candidate.join().unwrap();
    let took = led.duration_since(resigned);
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(
        a.election(&name)
            .unwrap()
            .leader()
            .unwrap()
            .unwrap()
            .value(),
        "b"
    );
    l.resign().unwrap();
}

#[test]
fn proclaim_by_a_lost_leader_fails_and_changes_nothing() {
    let server = Server::start();
    let name = key("lost");
    // No watchdog: the lost leader does not know it is lost, so only the
    // script's owner check can stop it.
    let old = server.builder().watchdog(false).build().unwrap();
    let leadership = old.election(&name).unwrap().campaign("old").unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("__redmutex__:election:{name}"))
        .query(&mut server.conn())
        .unwrap();
    let new = server
        .locker()
        .election(&name)
        .unwrap()
        .campaign("new")
        .unwrap();
    let entries = log_len(&server, &name);
    assert!(matches!(
        leadership.proclaim("stale"),
        Err(Error::Lost { .. })
    ));
    let leader = server
        .locker()
        .election(&name)
        .unwrap()
        .leader()
        .unwrap()
        .unwrap();
    assert_eq!(leader.value(), "new");
    assert_eq!(leader.term(), new.term());
    assert_eq!(log_len(&server, &name), entries, "nothing logged");
    assert!(matches!(leadership.resign(), Err(Error::Lost { .. })));
    // The resignation of the lost leader did not unseat the new one.
    assert_eq!(
        server
            .locker()
            .election(&name)
            .unwrap()
            .leader()
            .unwrap()
            .unwrap()
            .value(),
        "new"
    );
    new.resign().unwrap();
}

#[test]
fn an_election_refuses_bad_names_and_values_and_redlock() {
    let server = Server::start();
    let locker = server.locker();
    assert!(matches!(locker.election(""), Err(Error::InvalidInput(_))));
    assert!(matches!(
        locker.election("a__redmutex__b"),
        Err(Error::InvalidInput(_))
    ));
    let election = locker.election(key("values")).unwrap();
    let huge = "x".repeat(64 * 1024 + 1);
    assert!(matches!(
        election.try_campaign(&huge),
        Err(Error::InvalidInput(_))
    ));
    let servers = common::servers(3);
    let redlock = common::redlock_builder(&servers).build().unwrap();
    assert!(matches!(
        redlock.election("x"),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn an_election_on_a_cluster() {
    let cluster = Cluster::start();
    // An I/O timeout far below the observer's wait: its blocking read must
    // not be cut by it.
    let locker = Locker::builder(cluster.pool())
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let name = key("cluster");
    let election = locker.election(&name).unwrap();
    let watching = {
        let mut o = election.observe().unwrap();
        thread::Builder::new()
            .spawn(move || {
                (0..3)
                    .map(|_| seen(&o.next().unwrap().unwrap()))
                    .collect::<Vec<_>>()
            })
            .unwrap()
    };
    common::wait_until("the observer waits past the I/O timeout", LONG, || {
        cluster.urls().iter().any(|url| {
            let client = redis::Client::open(url.as_str()).unwrap();
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut client.get_connection().unwrap())
                .unwrap();
            list.lines().any(|l| {
                l.contains("cmd=xread")
                    && l.split(' ')
                        .find_map(|f| f.strip_prefix("idle="))
                        .and_then(|i| i.parse::<u64>().ok())
                        .is_some_and(|i| i >= 1)
            })
        })
    });
    let leadership = election.campaign("c1").unwrap();
    let term = leadership.term();
    assert_eq!(election.leader().unwrap().unwrap().value(), "c1");
    leadership.resign().unwrap();
    assert_eq!(
        watching.join().unwrap(),
        vec![None, Some((term, "c1".into())), None]
    );
}

#[test]
fn a_leadership_has_the_lease_states_of_its_guard() {
    let server = Server::start();
    let name = key("states");
    let locker = server.locker_with_ttl(Duration::from_millis(600));
    let leadership = locker.election(&name).unwrap().campaign("a").unwrap();
    assert_eq!(leadership.state(), redmutex::LeaseState::Held);
    // Unseated: its key deleted, the watchdog's next renewal finds it gone.
    let _: () = redis::cmd("DEL")
        .arg(format!("__redmutex__:election:{name}"))
        .query(&mut server.conn())
        .unwrap();
    let mut state = redmutex::LeaseState::Held;
    let deadline = Instant::now() + LONG;
    while state != redmutex::LeaseState::Lost && Instant::now() < deadline {
        state = leadership.wait_state_change(state, LONG);
    }
    assert_eq!(state, redmutex::LeaseState::Lost);
    assert!(leadership.is_lost());
    assert!(matches!(leadership.proclaim("b"), Err(Error::Lost { .. })));
}

#[test]
fn an_election_through_sentinel() {
    let master = Server::start();
    let _replica = Server::replica_of(&master);
    let sentinels = common::Sentinels::watch(&master);
    let locker = Locker::open_sentinel(sentinels.urls(), "mymaster").unwrap();
    let name = key("sentinel");
    let election = locker.election(&name).unwrap();
    let watching = observer(&locker, &name, 3);
    let leadership = election.campaign("s1").unwrap();
    let term = leadership.term();
    assert_eq!(election.leader().unwrap().unwrap().value(), "s1");
    // The key is on the master the sentinels name.
    let value: String = redis::cmd("GET")
        .arg(format!("__redmutex__:election:{name}"))
        .query(&mut master.conn())
        .unwrap();
    assert!(value.ends_with(":s1"), "{value}");
    leadership.resign().unwrap();
    assert_eq!(
        watching.join().unwrap(),
        vec![None, Some((term, "s1".into())), None]
    );
}

#[test]
fn an_observer_more_than_128_changes_behind_goes_on_from_the_oldest_kept() {
    let server = Server::start();
    let name = key("behind");
    let locker = server.locker();
    let election = locker.election(&name).unwrap();
    let mut observer = election.observe().unwrap();
    assert_eq!(seen(&observer.next().unwrap().unwrap()), None);
    // 201 changes while the observer reads nothing: the campaign, then
    // 200 values. The log keeps the latest 128.
    let leadership = election.campaign("v0").unwrap();
    for i in 1..=200 {
        leadership.proclaim(format!("v{i}")).unwrap();
    }
    assert_eq!(log_len(&server, &name), 128);
    let term = leadership.term();
    let read: Vec<Seen> = (0..128)
        .map(|_| seen(&observer.next().unwrap().unwrap()))
        .collect();
    let expected: Vec<Seen> = (73..=200).map(|i| Some((term, format!("v{i}")))).collect();
    assert_eq!(read, expected);
    leadership.resign().unwrap();
    assert_eq!(seen(&observer.next().unwrap().unwrap()), None);
}
