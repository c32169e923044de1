//! Elections and `Builder::lock_delay` (issue 42 item 5): a leader that
//! vanished without resigning (paused, its host cut off) may still act as
//! leader, so its successor waits out the delay as a lock's next holder
//! does; a resignation is a release, and hands over at once.
#![allow(clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::time::Duration;

use common::{key, wait_until, Server};

/// Far longer than the test needs to see a candidate refused inside it.
const DELAY: Duration = Duration::from_secs(5);

#[test]
fn a_leader_that_vanished_is_replaced_only_after_the_lock_delay() {
    let server = Server::start();
    let vanishing = server
        .builder()
        .ttl(Duration::from_millis(800))
        .watchdog(false)
        .lock_delay(DELAY)
        .build()
        .unwrap();
    let name = key("el-delay-vanished");
    let leader = vanishing
        .election(&name)
        .unwrap()
        .campaign("paused")
        .unwrap();
    // It never resigns: its lease runs out.
    std::mem::forget(leader);
    let other = server.locker().election(&name).unwrap();
    wait_until("the lease to run out", Duration::from_secs(20), || {
        other.leader().unwrap().is_none()
    });
    assert!(
        other.try_campaign("next").unwrap().is_none(),
        "a candidate led inside the vanished leader's lock-delay"
    );
    let next = other
        .campaign_timeout("next", Duration::from_secs(30))
        .unwrap();
    next.resign().unwrap();
}

#[test]
fn a_resignation_hands_over_at_once_whatever_the_lock_delay() {
    let server = Server::start();
    let delaying = server
        .builder()
        .lock_delay(Duration::from_secs(3600))
        .build()
        .unwrap();
    let name = key("el-delay-resigned");
    let election = delaying.election(&name).unwrap();
    let other = server.locker().election(&name).unwrap();
    // Resigned with nobody waiting: free at once.
    election.campaign("first").unwrap().resign().unwrap();
    let second = other
        .try_campaign("second")
        .unwrap()
        .expect("free at once after a resignation");
    second.resign().unwrap();
    // Dropped: the same.
    drop(election.campaign("first").unwrap());
    other
        .try_campaign("second")
        .unwrap()
        .expect("free at once after a drop")
        .resign()
        .unwrap();
    // Handed over to a candidate waiting: it leads at once.
    let first = election.campaign("first").unwrap();
    let waiting = std::thread::Builder::new()
        .spawn(move || other.campaign_timeout("second", Duration::from_secs(60)))
        .unwrap();
    let queue = format!("{}election-queue:{name}", common::reserved(None));
    wait_until("the candidate queued", Duration::from_secs(20), || {
        redis::cmd("ZCARD")
            .arg(&queue)
            .query::<u64>(&mut server.conn())
            .unwrap()
            == 1
    });
    first.resign().unwrap();
    let led = waiting.join().unwrap();
    led.unwrap().resign().unwrap();
}
