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
