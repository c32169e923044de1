//! The server's share of the hot path: the calls each common case makes,
//! counted with `INFO commandstats` (each `redis.call` inside a script
//! counts as a command of its own). Features that are off (lock-delay,
//! audit) cost the server nothing, and each case makes only the calls it
//! needs: no `EXISTS` of a key the case reads anyway, one `TIME` where a
//! token is minted, the fencing counter read and written in one call.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)] // tests fail loudly

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{key, wait_behind, wait_until, Server};

/// Starts the server's command statistics afresh.
fn reset(server: &Server) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut server.conn())
        .unwrap();
}

/// The commands the server ran since the last [`reset`], each with how
/// many times (the test's own `CONFIG`, `INFO` and `CLIENT` left out).
fn calls(server: &Server) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, stats) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        // The test's own connections' handshakes (`CLIENT SETINFO`) too.
        .filter(|(name, _)| {
            !name.starts_with("config") && !name.starts_with("client") && name != "info"
        })
        .collect()
}

fn expect(list: &[(&str, u64)]) -> BTreeMap<String, u64> {
    list.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
}

/// An uncontended lock and unlock: the acquire script checks the key, its
/// queue and its lock-delay marks in one `EXISTS`, reads the clock, mints
/// the token with one `SET ... GET` of the counter and sets the key; the
/// release reads the key (ours?), pops the queue's head (nobody), deletes
/// the key and announces it.
#[test]
fn an_uncontended_lock_and_unlock_make_only_the_calls_they_need() {
    let server = Server::start();
    let locker = server.locker();
    let k = key("share");
    // The scripts loaded, the server's version checked.
    locker.lock(&k).unwrap().unlock().unwrap();
    reset(&server);
    const CYCLES: u64 = 10;
    for _ in 0..CYCLES {
        locker.lock(&k).unwrap().unlock().unwrap();
    }
    let per_cycle: BTreeMap<String, u64> = calls(&server)
        .into_iter()
        .map(|(name, n)| (name, n / CYCLES))
        .collect();
    assert_eq!(
        per_cycle,
        expect(&[
            ("del", 1),
            ("evalsha", 2),
            ("exists", 1),
            ("get", 1),
            ("publish", 1),
            ("set", 2),
            ("time", 1),
            ("zpopmin", 1),
        ])
    );
}

/// A hand-over, release to take-up: the release reads the key, pops the
/// waiter, reads and drops its entry, reads the clock once (the waiter's
/// deadline and the token), mints with one `SET ... GET`, sets the claim
/// and announces it; the waiter's take-up reads the key and sets its TTL.
#[test]
fn a_hand_over_makes_only_the_calls_it_needs() {
    let server = Server::start();
    let (holder, waiter) = (server.slow_locker(), server.slow_locker());
    let k = key("share-handed");
    // A first hand-over loads every script; the waiter's listener comes up
    // then (a first waiter makes two attempts before it waits).
    let mut attempts = 2;
    for _ in 0..5 {
        let held = holder.lock(&k).unwrap();
        let t = wait_behind(&server, &waiter, &k, Duration::from_secs(30), attempts);
        attempts = 1;
        reset(&server);
        drop(held);
        let guard = t.join().unwrap().0.unwrap();
        wait_until("the take-up", Duration::from_secs(10), || {
            guard.valid_until() > Instant::now() + Duration::from_secs(30)
        });
        let seen = calls(&server);
        drop(guard);
        if seen.get("evalsha") != Some(&2) || seen.contains_key("eval") {
            // A refresh of the waiter's place came in between, or a
            // script was loaded (the first round): not the case counted.
            continue;
        }
        assert_eq!(
            seen,
            expect(&[
                ("evalsha", 2),
                ("get", 2),
                ("hdel", 1),
                ("hget", 1),
                ("pexpire", 1),
                ("publish", 1),
                ("set", 2),
                ("time", 1),
                ("zpopmin", 1),
            ])
        );
        return;
    }
    panic!("no hand-over of five was counted alone");
}
