//! An election's leader, operated (issue 42, item 9): a stuck leader at
//! 3 a.m. must be visible and breakable. `Locker::locks` lists it (kind
//! `leader`, by the name `__redmutex__:election:<name>`, its value as the
//! holder, its term as the token, its queued candidates as the waiters),
//! `Locker::holder` reads it by that name, `Locker::break_lock` breaks it:
//! observers are told "no leader" (or the candidate it is handed to), the
//! broken leader's lease is `Lost` with `LeaseChangeReason::Broken`, and
//! with `Builder::audit(true)` its grant and release are in the trail.
// Test helpers fail loudly: that is the point.
#![allow(
    clippy::disallowed_methods,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{key, wait_until, Server};
use redmutex::{LeaseChangeReason, Locker};

/// A locker of its own with `prefix`, audit on, and a callback that
/// records the reason of every loss.
fn locker(
    server: &Server,
    prefix: &str,
    ttl: Duration,
) -> (Locker, Arc<Mutex<Vec<LeaseChangeReason>>>) {
    common::recording_losses(server.builder().prefix(prefix).ttl(ttl).audit(true))
}

/// The latest entry of the election log `name` of `prefix`: its fields.
fn latest_log_entry(server: &Server, prefix: &str, name: &str) -> Vec<String> {
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
        .arg(format!("{prefix}:__redmutex__:election-log:{name}"))
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query(&mut server.conn())
        .unwrap();
    entries
        .into_iter()
        .next()
        .map(|(_, f)| f)
        .unwrap_or_default()
}

#[test]
fn a_stuck_leader_is_listed_and_broken_and_everyone_is_told() {
    let server = Server::start();
    let prefix = key("leader-break");
    let (a, told) = locker(&server, &prefix, Duration::from_millis(900));
    let election = a.election("primary").unwrap();
    let leading = election.campaign("node-1").unwrap();
    let mut observer = election.observe().unwrap();
    let first = observer.next().unwrap().unwrap().unwrap();
    assert_eq!(first.term(), leading.term());

    // Listed, and read by the name the listing gives.
    let list = a.locks().unwrap();
    let name = "__redmutex__:election:primary";
    let listed = list
        .iter()
        .find(|i| i.key() == name)
        .unwrap_or_else(|| panic!("the leader is not listed: {list:?}"));
    assert_eq!(listed.kind().as_str(), "leader");
    assert_eq!(listed.name(), "primary");
    assert_eq!(listed.metadata(), "node-1");
    assert_eq!(listed.fencing_token(), leading.term());
    let read = a.holder(name).unwrap().expect("the leader's hold");
    assert_eq!(read.fencing_token(), leading.term());

    // Broken: observers are told "no leader" (logged by the break itself).
    let broken = a.break_lock(name, "stuck at 3 a.m.").unwrap().unwrap();
    assert_eq!(broken.fencing_token(), leading.term());
    let entry = latest_log_entry(&server, &prefix, "primary");
    assert_eq!(
        (entry[0].as_str(), entry[1].as_str(), entry[3].as_str()),
        ("term", "", leading.term().to_string().as_str()),
        "the log's latest entry is not 'no leader': {entry:?}"
    );
    assert_eq!(observer.next().unwrap().unwrap(), None);
    assert!(election.leader().unwrap().is_none());

    // The leader learns it at its next renewal, as a break.
    assert!(leading.wait_lost(Duration::from_secs(10)), "not told");
    assert_eq!(
        leading.guard().lost_reason().as_deref(),
        Some("broken by an operator: stuck at 3 a.m.")
    );
    wait_until("the loss told", Duration::from_secs(10), || {
        !told.lock().unwrap().is_empty()
    });
    assert_eq!(*told.lock().unwrap(), [LeaseChangeReason::Broken]);
    assert_eq!(a.stats().losses_broken(), 1);

    // Audited: the leadership's grant, and the break.
    let trail: Vec<(String, String, String, String)> = a
        .audit(None)
        .unwrap()
        .iter()
        .map(|e| {
            (
                e.action().to_owned(),
                e.kind().as_str().to_owned(),
                e.key().to_owned(),
                e.metadata().to_owned(),
            )
        })
        .collect();
    // Its value, as the listing shows it, in each event.
    let want = |action: &str| {
        let owned = |s: &str| s.to_owned();
        (owned(action), owned("leader"), owned(name), owned("node-1"))
    };
    assert_eq!(trail, [want("grant"), want("break")], "{trail:?}");
    drop(leading);
}

#[test]
fn a_broken_leader_hands_the_lead_to_the_next_candidate() {
    let server = Server::start();
    let prefix = key("leader-hand");
    let (a, _) = locker(&server, &prefix, Duration::from_secs(60));
    let (b, _) = locker(&server, &prefix, Duration::from_secs(60));
    let election = a.election("primary").unwrap();
    let leading = election.campaign("node-1").unwrap();
    let mut observer = election.observe().unwrap();
    observer.next().unwrap().unwrap();
    let next = {
        let election = b.election("primary").unwrap();
        std::thread::spawn(move || election.campaign_timeout("node-2", Duration::from_secs(30)))
    };
    let name = "__redmutex__:election:primary";
    wait_until("the candidate queued", Duration::from_secs(20), || {
        a.holder(name)
            .ok()
            .flatten()
            .is_some_and(|i| i.waiters() == ["node-2"])
    });
    let broken = a.break_lock(name, "stuck").unwrap().unwrap();
    assert_eq!(broken.waiters(), ["node-2"]);
    let now = next.join().unwrap().unwrap();
    assert!(now.term() > leading.term());
    let seen = observer.next().unwrap().unwrap().expect("the next leader");
    assert_eq!((seen.value(), seen.term()), ("node-2", now.term()));

    // The old leader's own calls find the break (no renewal for 20 s).
    assert!(leading.proclaim("node-1 again").is_err());
    assert_eq!(
        leading.guard().lost_reason().as_deref(),
        Some("broken by an operator: stuck")
    );
    assert!(leading.resign().is_err());
    assert_eq!(a.stats().losses_broken(), 1);
    // Its resignation hands nothing over and logs nothing.
    assert_eq!(election.leader().unwrap().unwrap().term(), now.term());
    now.resign().unwrap();
}

#[test]
fn a_leaders_release_in_the_trail_carries_the_value_it_proclaimed() {
    // A leadership's audit events carry the leader's value, "as listings
    // show it": after `proclaim`, the listing (and a break) show the new
    // value, so its release must too. Before, the release carried the
    // value it campaigned with.
    let server = Server::start();
    let prefix = key("leader-proclaimed");
    let (a, _) = locker(&server, &prefix, Duration::from_secs(60));
    let leading = a.election("primary").unwrap().campaign("starting").unwrap();
    leading.proclaim("10.0.0.7:8080").unwrap();
    let name = "__redmutex__:election:primary";
    let listed = a.holder(name).unwrap().expect("the leader's hold");
    assert_eq!(listed.metadata(), "10.0.0.7:8080");
    leading.resign().unwrap();
    let trail: Vec<(String, String)> = a
        .audit(None)
        .unwrap()
        .iter()
        .map(|e| (e.action().to_owned(), e.metadata().to_owned()))
        .collect();
    let event = |action: &str, value: &str| (action.to_owned(), value.to_owned());
    assert_eq!(
        trail,
        [
            event("grant", "starting"),
            event("release", "10.0.0.7:8080")
        ]
    );
}
