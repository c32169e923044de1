//! `Leadership::hand_over_to`: the lead passes at once to the candidate
//! queued with a value, ahead of the others, who keep their order; with no
//! such candidate, to the first queued, as a resignation; observers see
//! each change in order.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::thread::{self, JoinHandle};
use std::time::Duration;

use common::{key, Server};
use redmutex::{Backoff, Error, Leadership, Locker};

const LONG: Duration = Duration::from_secs(20);

/// How many candidates are queued for the election `name` (no prefix).
fn queued(server: &Server, name: &str) -> u64 {
    common::queued_in(server, &format!("__redmutex__:election-queue:{name}"))
}

/// A locker whose candidates retry only every minute: only a hand-over
/// gets them the lead quickly.
fn slow(server: &Server) -> Locker {
    server
        .builder()
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap()
}

/// Queues a candidate for `value` on a locker of its own (as another
/// process), once the ones before it are queued.
fn candidate(server: &Server, name: &str, value: &str, before: u64) -> JoinHandle<Leadership> {
    let election = slow(server).election(name).unwrap();
    let value = value.to_owned();
    let t = thread::Builder::new()
        .spawn(move || election.campaign_timeout(value, LONG).unwrap())
        .unwrap();
    common::wait_until("the candidate queued", LONG, || {
        queued(server, name) == before + 1
    });
    t
}

#[test]
fn the_lead_goes_to_the_chosen_candidate_ahead_of_the_others() {
    let server = Server::start();
    let name = key("rolling");
    let observer_locker = server.locker();
    let leadership = slow(&server)
        .election(&name)
        .unwrap()
        .campaign("v1")
        .unwrap();
    let mut observer = observer_locker.election(&name).unwrap().observe().unwrap();
    // Queued in this order: two others, then the new version, then one more.
    let first = candidate(&server, &name, "other-1", 0);
    let second = candidate(&server, &name, "other-2", 1);
    let chosen = candidate(&server, &name, "v2", 2);
    let last = candidate(&server, &name, "other-3", 3);

    let v1_term = leadership.term();
    assert!(leadership.hand_over_to("v2").unwrap());
    let v2 = chosen.join().unwrap();
    assert!(v2.term() > v1_term);
    assert_eq!(
        observer_locker
            .election(&name)
            .unwrap()
            .leader()
            .unwrap()
            .map(|l| l.value().to_owned()),
        Some("v2".to_owned())
    );
    // The others still wait, in their order.
    assert_eq!(queued(&server, &name), 3);
    assert!(!first.is_finished() && !second.is_finished() && !last.is_finished());

    // No candidate with the value: the first queued leads, as on resign.
    assert!(!v2.hand_over_to("v3").unwrap());
    let next = first.join().unwrap();
    assert_eq!(queued(&server, &name), 2);
    // And by value again, past the one queued first.
    assert!(next.hand_over_to("other-3").unwrap());
    let l3 = last.join().unwrap();
    assert!(!second.is_finished());
    l3.resign().unwrap();
    second.join().unwrap().resign().unwrap();

    // Observers saw each leader in order, with no gap between them.
    let values = common::observed(&mut observer, 6);
    let want = ["v1", "v2", "other-1", "other-3", "other-2"];
    let want: Vec<Option<String>> = want
        .iter()
        .map(|v| Some((*v).to_owned()))
        .chain([None])
        .collect();
    assert_eq!(values, want);
}

#[test]
fn with_nobody_queued_the_election_is_left_without_a_leader() {
    let server = Server::start();
    let name = key("alone");
    let locker = server.locker();
    let election = locker.election(&name).unwrap();
    let leadership = election.campaign("v1").unwrap();
    assert!(!leadership.hand_over_to("v2").unwrap());
    assert!(election.leader().unwrap().is_none());
}

#[test]
fn a_lost_leader_hands_nothing_over() {
    let server = Server::start();
    let name = key("lost");
    let locker = server.locker();
    let leadership = locker.election(&name).unwrap().campaign("v1").unwrap();
    let chosen = candidate(&server, &name, "v2", 0);
    // Someone else leads now (the key taken over behind the leader's back).
    let election_key = format!("__redmutex__:election:{name}");
    common::lock_as_someone_else(&server, &election_key, 60_000);
    let got = leadership.hand_over_to("v2");
    assert!(matches!(got, Err(Error::Lost { .. })), "{got:?}");
    // The candidate was not moved or handed anything: still queued.
    assert_eq!(queued(&server, &name), 1);
    assert!(!chosen.is_finished());
    let _: () = redis::cmd("DEL")
        .arg(&election_key)
        .query(&mut server.conn())
        .unwrap();
}
