//! A hostile review of issue 46 (a handed-over waiter returns holding the
//! hand-over's claim, its watchdog takes it up behind) and of issue 45
//! (downgrade, hand_over_to, AlreadyHeld), on real servers.
#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{key, Server};
use redmutex::{Guard, Locker};
use redmutex_testkit::proxy::Proxy;

/// The key's value and PTTL, read in one script, with the moment after
/// the reply: the key expires no later than `after + pttl + 1 ms`.
fn value_and_pttl(conn: &mut redis::Connection, k: &str) -> (Option<String>, i64, Instant) {
    let (v, pttl): (Option<String>, i64) = redis::Script::new(
        "return {redis.call('GET', KEYS[1]) or false, redis.call('PTTL', KEYS[1])}",
    )
    .key(k)
    .invoke(conn)
    .unwrap();
    (v, pttl, Instant::now())
}

/// Whether `guard`, believed valid until `believed` (read before the
/// look), is believed past what Redis grants it: its key gone or someone
/// else's, or set to expire before `believed`. `None`: nothing wrong.
fn believed_past_redis(
    conn: &mut redis::Connection,
    k: &str,
    guard: &Guard,
    believed: Instant,
) -> Option<String> {
    let (v, pttl, after) = value_and_pttl(conn, k);
    if believed <= after {
        return None; // the belief had ended before the look: nothing to say
    }
    let ours = v
        .as_deref()
        .and_then(common::fence_in)
        .is_some_and(|f| f == guard.fencing_token());
    if !ours || pttl < 0 {
        return Some(format!(
            "believed valid {:?} past the look, but the key is {v:?} (PTTL {pttl})",
            believed - after
        ));
    }
    let expires_by = after + Duration::from_millis(u64::try_from(pttl).unwrap() + 1);
    (believed > expires_by).then(|| {
        format!(
            "believed valid {:?} past the key's expiry (PTTL {pttl} ms)",
            believed - expires_by
        )
    })
}

/// One critical section: when it ran, its fencing token, and whether the
/// guard was still not lost at its end (looked at after it).
#[derive(Debug, Clone, Copy)]
struct Section {
    start: Instant,
    end: Instant,
    fence: u64,
    valid: bool,
}

/// Very short TTLs (60 ms: the claim is the TTL, and the take-up comes a
/// millisecond plus a round trip after `lock` returns), four contenders,
/// each on its own pool: no two sections whose guards were never lost
/// overlap, their fencing tokens rise in their order, and no guard is
/// believed valid past its key's expiry in Redis at any look (the claim
/// before its take-up included).
#[test]
fn short_ttl_hand_overs_never_overlap_and_are_never_believed_past_redis() {
    short_ttl_rounds(Duration::from_millis(60), None);
}

/// As above, with a lease of 100 ms and half the contenders 20 ms away
/// (each way): the take-up comes 40 ms after the return, well inside the
/// claim, and a waiter's last attempt is older when the lock is handed
/// over.
#[test]
fn short_ttl_hand_overs_over_a_slow_link_never_overlap_and_are_never_believed_past_redis() {
    short_ttl_rounds(Duration::from_millis(100), Some(Duration::from_millis(20)));
}

fn short_ttl_rounds(ttl: Duration, delay: Option<Duration>) {
    let server = Server::start();
    let k = key("short-ttl");
    let sections = Arc::new(Mutex::new(Vec::<Section>::new()));
    let wrong = Arc::new(Mutex::new(Vec::<String>::new()));
    let proxy = delay.map(|d| Proxy::with_delay(server.port(), d));
    let lockers: Vec<Locker> = (0..4)
        .map(|i| match &proxy {
            Some(p) if i % 2 == 1 => Locker::builder(redmutex::pool(&p.url()).unwrap())
                .ttl(ttl)
                .build()
                .unwrap(),
            _ => server.locker_with_ttl(ttl),
        })
        .collect();
    let threads: Vec<_> = lockers
        .iter()
        .map(|locker| {
            let (locker, k) = (locker.clone(), k.clone());
            let (sections, wrong) = (Arc::clone(&sections), Arc::clone(&wrong));
            let mut conn = server.conn();
            std::thread::Builder::new()
                .spawn(move || {
                    for _ in 0..30 {
                        let Ok(guard) = locker.lock_timeout(&k, Duration::from_secs(20)) else {
                            continue;
                        };
                        let start = Instant::now();
                        // At once, before the take-up's reply: the claim.
                        let believed = guard.valid_until();
                        if let Some(w) = believed_past_redis(&mut conn, &k, &guard, believed) {
                            wrong.lock().unwrap().push(format!("at return: {w}"));
                        }
                        std::thread::sleep(Duration::from_millis(3));
                        let believed = guard.valid_until();
                        if let Some(w) = believed_past_redis(&mut conn, &k, &guard, believed) {
                            wrong.lock().unwrap().push(format!("in the section: {w}"));
                        }
                        let end = Instant::now();
                        let valid = !guard.is_lost();
                        let fence = guard.fencing_token();
                        drop(guard);
                        sections.lock().unwrap().push(Section {
                            start,
                            end,
                            fence,
                            valid,
                        });
                    }
                })
                .unwrap()
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let handed: u64 = lockers.iter().map(|l| l.stats().hand_overs()).sum();
    let wrong = wrong.lock().unwrap();
    assert!(
        wrong.is_empty(),
        "{} looks went wrong: {wrong:#?}",
        wrong.len()
    );
    let mut valid: Vec<Section> = sections
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|s| s.valid)
        .collect();
    valid.sort_by_key(|s| s.start);
    for pair in valid.windows(2) {
        assert!(
            pair[0].end < pair[1].start,
            "two holders at once: {pair:?} ({handed} hand-overs)"
        );
        assert!(
            pair[0].fence < pair[1].fence,
            "fencing tokens went back: {pair:?}"
        );
    }
    eprintln!(
        "{} sections, {} never lost, {handed} hand-overs",
        sections.lock().unwrap().len(),
        valid.len()
    );
}
