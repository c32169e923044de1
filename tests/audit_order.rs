//! The audit trail of one hold is in the order the server granted,
//! released and broke it (issue 42, item 6), whichever locker (or thread)
//! wrote its events first, and a grant that never became a hold (a lock
//! handed over whose take-up failed) is not in it. Before, events were in
//! the order a background thread wrote them: in 200 lock/unlock rounds on
//! one key, 98 to 166 places showed the next holder's grant before the
//! previous holder's release.
// Test helpers fail loudly: that is the point.
#![allow(
    clippy::disallowed_methods,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::time::Duration;

use common::{fence_in, key, Server};
use redmutex::{AuditEntry, Backoff, Locker};
use redmutex_testkit::proxy::{Mode, Proxy};

/// The events of `key` in `trail`, as (action, token).
fn of_key(trail: &[AuditEntry], key: &str) -> Vec<(String, u64)> {
    trail
        .iter()
        .filter(|e| e.key() == key)
        .map(|e| (e.action().to_owned(), e.fencing_token()))
        .collect()
}

#[test]
fn a_keys_trail_is_in_the_order_the_server_granted_and_released() {
    let server = Server::start();
    let prefix = key("audit-order");
    let audited = || {
        server
            .builder()
            .prefix(&prefix)
            .audit(true)
            .build()
            .unwrap()
    };
    // Two lockers (two processes, as far as the trail can tell), one of
    // them used by two threads (an in-process waiter is woken by the
    // release before the releaser's event is queued).
    let (a, b) = (audited(), audited());
    let workers: Vec<_> = [a.clone(), a.clone(), b.clone()]
        .into_iter()
        .map(|l: Locker| {
            std::thread::spawn(move || {
                for _ in 0..70 {
                    l.lock("k").unwrap().unlock().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    // Each read waits for its own locker's queued events.
    a.audit(None).unwrap();
    let trail = b.audit(None).unwrap();
    let events = of_key(&trail, "k");
    assert_eq!(events.len(), 2 * 210, "events lost: {}", events.len());
    let mut misplaced = Vec::new();
    for (i, pair) in events.chunks(2).enumerate() {
        let ok = pair[0].0 == "grant" && pair[1].0 == "release" && pair[0].1 == pair[1].1;
        let rising = i == 0 || pair[0].1 > events[2 * i - 1].1;
        if !ok || !rising {
            misplaced.push((2 * i, pair.to_vec()));
        }
    }
    assert!(
        misplaced.is_empty(),
        "{} of 210 rounds out of the server's order, first: {:?}",
        misplaced.len(),
        misplaced.first()
    );
    // And in time: no event of the key before the one the server made
    // first.
    let times: Vec<_> = trail
        .iter()
        .filter(|e| e.key() == "k")
        .map(AuditEntry::time)
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "times out of order");
}

#[test]
fn a_hand_over_whose_take_up_failed_is_no_grant_in_the_trail() {
    // A lock handed over is first a claim, which the waiter takes up with
    // one renewal. Here the claim is taken away (deleted, as an expiry
    // would) while the hand-over's news and the take-up are on their way
    // through a slow link: the take-up fails, the waiter waits on and is
    // granted the lock afresh. Only that grant is one; the claim's token
    // must not be in the trail. Whether the deletion comes before the
    // take-up cannot be forced: a round where it did not is tried again.
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    let holder = server.builder().audit(true).build().unwrap();
    // A backoff of a minute: while queued, the waiter calls only to keep
    // its place (once a second), so a hand-over reaches it by its news.
    // Without a watchdog, `lock` takes the claim up before it returns (with
    // one, it returns the claim, which is then a hold: see the next test).
    let waiter = Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .audit(true)
        .watchdog(false)
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap();
    let take = redis::Script::new(
        "local v = redis.call('GET', KEYS[1]); redis.call('DEL', KEYS[1]); return v",
    );
    for round in 0..5 {
        proxy.set(Mode::Pass);
        let k = key(&format!("audit-take-up-{round}"));
        let held = holder.lock(&k).unwrap();
        let waiting = {
            let (waiter, k) = (waiter.clone(), k.clone());
            std::thread::spawn(move || {
                let g = waiter.lock_timeout(&k, Duration::from_secs(30)).unwrap();
                let token = g.fencing_token();
                g.unlock().unwrap();
                token
            })
        };
        common::queued_and_listening(&server, &k);
        // Right after one of the waiter's calls, so that none comes
        // between the hand-over and its take-up.
        common::after_a_call(&server);
        proxy.set(Mode::Delay);
        let first = held.fencing_token();
        held.unlock().unwrap();
        let claim: Option<String> = take.key(&k).invoke(&mut server.conn()).unwrap();
        let token = waiting.join().unwrap();
        let Some(claimed) = claim.as_deref().and_then(fence_in) else {
            continue; // not handed over (the waiter was between calls)
        };
        if token == claimed {
            continue; // taken up before the claim was taken away
        }
        holder.audit(None).unwrap();
        let trail = waiter.audit(None).unwrap();
        assert_eq!(
            of_key(&trail, &k),
            [
                ("grant".to_owned(), first),
                ("release".to_owned(), first),
                ("grant".to_owned(), token),
                ("release".to_owned(), token)
            ],
            "the claim's token is {claimed}"
        );
        return;
    }
    panic!("in 5 rounds the claim was never taken away before its take-up");
}

#[test]
fn a_trail_read_from_a_moment_has_every_event_made_after_it() {
    // `audit(Some(t))` is the trail "from `t` on": an event the server made
    // after `t` is in it. The stream's times are whole milliseconds (an
    // entry's ID), and `t` is not: an event written in the millisecond of
    // `t`, after it, was left out (in about half of these rounds), where
    // the stream read from `t`'s millisecond has it.
    let server = Server::start();
    let prefix = key("audit-since");
    let locker = server
        .builder()
        .prefix(&prefix)
        .audit(true)
        .build()
        .unwrap();
    let mut missed = Vec::new();
    for round in 0..40 {
        let k = format!("k{round}");
        let t = std::time::SystemTime::now();
        locker.lock(&k).unwrap().unlock().unwrap();
        let trail = locker.audit(Some(t)).unwrap();
        let events = of_key(&trail, &k);
        if events.len() != 2 {
            missed.push((round, events));
        }
    }
    assert!(
        missed.is_empty(),
        "{} of 40 rounds lost events made after `since`, first: {:?}",
        missed.len(),
        missed.first()
    );
}
