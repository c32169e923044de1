//! A hostile review of issue 46 (a handed-over waiter returns holding the
//! hand-over's claim, its watchdog takes it up behind) and of issue 45
//! (downgrade, hand_over_to, AlreadyHeld), on real servers.
#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{key, Server};
use redmutex::{Backoff, Guard, LeaseState, Locker};
use redmutex_testkit::proxy::{Mode, Proxy};

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
    contend(&lockers, &key("short-ttl"), Some(&server));
}

/// Redlock on three masters, 60 ms leases: a release wakes the others,
/// and whoever wins next has a token above every earlier one (minted by
/// each master with `SET ... GET` now), with no two sections at once.
#[test]
fn short_ttl_redlock_rounds_never_overlap_and_their_tokens_rise() {
    let servers = common::servers(3);
    let lockers: Vec<Locker> = (0..4)
        .map(|_| {
            common::redlock_builder(&servers)
                .ttl(Duration::from_millis(60))
                .build()
                .unwrap()
        })
        .collect();
    contend(&lockers, &key("short-redlock"), None);
}

/// Each of `lockers`, on a thread of its own, takes `k` 30 times for a
/// 3 ms section; on one `server`, each guard's belief is checked against
/// Redis at its return and in its section. No two sections whose guards
/// were never lost overlap, and their tokens rise in their order.
fn contend(lockers: &[Locker], k: &str, server: Option<&Server>) {
    let sections = Arc::new(Mutex::new(Vec::<Section>::new()));
    let wrong = Arc::new(Mutex::new(Vec::<String>::new()));
    let threads: Vec<_> = lockers
        .iter()
        .map(|locker| {
            let (locker, k) = (locker.clone(), k.to_owned());
            let (sections, wrong) = (Arc::clone(&sections), Arc::clone(&wrong));
            let mut conn = server.map(Server::conn);
            std::thread::Builder::new()
                .spawn(move || {
                    for _ in 0..30 {
                        let Ok(guard) = locker.lock_timeout(&k, Duration::from_secs(20)) else {
                            continue;
                        };
                        let start = Instant::now();
                        for when in ["at return", "in the section"] {
                            // At once, before the take-up's reply: the claim.
                            let believed = guard.valid_until();
                            if let Some(c) = conn.as_mut() {
                                if let Some(w) = believed_past_redis(c, &k, &guard, believed) {
                                    wrong.lock().unwrap().push(format!("{when}: {w}"));
                                }
                            }
                            std::thread::sleep(Duration::from_millis(3));
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
        let [a, b] = pair else { continue };
        assert!(
            a.end < b.start,
            "two holders at once: {pair:?} ({handed} hand-overs)"
        );
        assert!(a.fence < b.fence, "fencing tokens went back: {pair:?}");
    }
    eprintln!(
        "{} sections, {} never lost, {handed} hand-overs",
        sections.lock().unwrap().len(),
        valid.len()
    );
}

/// The claim of a `slow_link_waiter`: its stay, a second of backoff (its
/// longest queued pause) plus 2 s of checkout and I/O timeouts.
const CLAIM: Duration = Duration::from_secs(3);

/// A locker whose every round trip crosses `proxy` (150 ms each way), with
/// a minute of backoff (queued, only a release gets it the lock soon), the
/// audit trail on, and its lease changes recorded in `changes`.
fn slow_link_waiter(proxy: &Proxy, changes: &Changes) -> Locker {
    let changes = Arc::clone(changes);
    Locker::builder(redmutex::pool(&proxy.url()).unwrap())
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .audit(true)
        .on_lease_change(move |c| changes.lock().unwrap().push((c.from(), c.to(), c.reason())))
        .build()
        .unwrap()
}

/// A proxy 150 ms away from `server`, a holder on `server` itself and a
/// `slow_link_waiter` across the proxy (both audited), and the waiter's
/// lease changes.
fn slow_pair(server: &Server) -> (Proxy, Changes, Locker, Locker) {
    let proxy = Proxy::with_delay(server.port(), Duration::from_millis(150));
    let changes = Changes::default();
    let holder = server.builder().audit(true).build().unwrap();
    let waiter = slow_link_waiter(&proxy, &changes);
    (proxy, changes, holder, waiter)
}

type Changes = Arc<Mutex<Vec<(LeaseState, LeaseState, redmutex::LeaseChangeReason)>>>;

/// What a handed-over waiter saw as `lock` returned (before `then` ran on
/// its thread): its guard, when, and the claim's deadline.
struct Claimed {
    guard: Guard,
    at: Instant,
    claim_until: Instant,
}

/// `holder` holds `k` (through `take`), a waiter of `waiter` queues behind
/// it, the holder releases; the waiter runs `then` on its guard the moment
/// `lock` returns. `None` unless the lock was handed over to it by that
/// release and returned as a bare claim (a precondition: try again).
fn claimed(
    server: &Server,
    holder: &Locker,
    waiter: &Locker,
    take: &(dyn Fn(&Locker) -> Guard + Sync),
    queue: &str,
    then: &(dyn Fn(&Guard) + Sync),
) -> Option<Claimed> {
    let held = take(holder);
    let before = waiter.stats().hand_overs();
    let got = std::thread::scope(|s| {
        let t = s.spawn(|| {
            let guard = take(waiter);
            let at = Instant::now();
            let claim_until = guard.valid_until();
            if claim_until.saturating_duration_since(at) < CLAIM {
                then(&guard);
            }
            Claimed {
                guard,
                at,
                claim_until,
            }
        });
        common::wait_until("the waiter is queued", Duration::from_secs(10), || {
            common::queued_in(server, queue) == 1
        });
        held.unlock().unwrap();
        t.join().unwrap()
    });
    let bare = got.claim_until.saturating_duration_since(got.at) < CLAIM;
    (waiter.stats().hand_overs() > before && bare).then_some(got)
}

/// [`claimed`] on the keys `<name>-<round>` until one is (four rounds).
fn first_claimed(
    server: &Server,
    holder: &Locker,
    waiter: &Locker,
    name: &str,
    then: &(dyn Fn(&Guard) + Sync),
) -> (String, Claimed) {
    for round in 0..4 {
        let k = key(&format!("{name}-{round}"));
        let queue = common::queue_keys(None, &k).0;
        let take = |l: &Locker| l.lock(&k).unwrap();
        if let Some(c) = claimed(server, holder, waiter, &take, &queue, then) {
            return (k, c);
        }
    }
    panic!("no round of four returned a bare claim");
}
/// A bare claim returned to a `slow_link_waiter` whose replies then stall
/// (its take-up is applied, never confirmed), once the claim is lost: the
/// proxy, the changes told, the waiter's locker and the claim.
fn stalled_claim(server: &Server, name: &str) -> (Proxy, Changes, Locker, Claimed) {
    let (proxy, changes, holder, waiter) = slow_pair(server);
    let stall = || proxy.set(Mode::StallReplies);
    let (_, c) = first_claimed(server, &holder, &waiter, name, &|_| stall());
    assert!(c.guard.wait_lost(Duration::from_secs(20)));
    (proxy, changes, waiter, c)
}

/// A take-up whose reply never comes (the server applies it, its replies
/// stall): the claim is held until its deadline, then lost, told and
/// counted as expired, even when the guard ends while the server still
/// does not answer.
#[test]
fn a_take_up_whose_reply_never_comes_is_lost_at_the_claims_deadline_and_counted() {
    let server = Server::start();
    let (proxy, changes, waiter, c) = stalled_claim(&server, "stalled-take-up");
    assert!(Instant::now() >= c.claim_until);
    assert_eq!(
        c.guard.valid_until(),
        c.claim_until,
        "a take-up was confirmed"
    );
    assert_eq!(
        c.guard.lost_reason().as_deref(),
        Some("its deadline passed without a confirmed renewal")
    );
    common::wait_until("the loss is told", Duration::from_secs(10), || {
        changes
            .lock()
            .unwrap()
            .last()
            .is_some_and(|c| c.1 == LeaseState::Lost)
    });
    // Ended while the server still does not answer.
    let unlocked = c.guard.unlock();
    assert!(unlocked.is_err(), "{unlocked:?}");
    let s = waiter.stats();
    assert_eq!(
        (s.hand_overs(), s.losses_expired()),
        (1, 1),
        "a claim lost at its deadline, ended: {s}"
    );
    proxy.set(Mode::Pass);
}

/// The same stalled take-up, unlocked while the server still does not
/// answer: `unlock` says the lease was lost (its docs: the section may have
/// overlapped another holder), as `downgrade` of a lost hold does, rather
/// than the release's timeout, which hides the loss from a caller that
/// checks for `Error::Lost`.
#[test]
fn unlock_of_a_claim_lost_at_its_deadline_says_lost_while_the_server_hangs() {
    let server = Server::start();
    let (proxy, _changes, _waiter, c) = stalled_claim(&server, "stalled-unlock");
    let unlocked = c.guard.unlock();
    assert!(
        matches!(unlocked, Err(redmutex::Error::Lost { .. })),
        "unlock of a lost lease: {unlocked:?}"
    );
    proxy.set(Mode::Pass);
}

/// An operator's break while the claim's take-up is on its way (150 ms to
/// the server): the guard `lock` returned is lost as broken (its reason,
/// the stats, the callback), and the trail has the claim's grant, then
/// the break, of its fencing token.
#[test]
fn a_break_before_the_take_up_is_told_as_a_break_and_the_trail_has_the_grant() {
    let server = Server::start();
    let (_proxy, changes, holder, waiter) = slow_pair(&server);
    let breaker = server.builder().audit(true).build().unwrap();
    let (k, c) = first_claimed(&server, &holder, &waiter, "broken-claim", &|g| {
        let _ = breaker.break_lock(g.keys()[0].as_str(), "review").unwrap();
    });
    assert!(c.guard.wait_lost(Duration::from_secs(20)));
    assert_eq!(
        c.guard.lost_reason().as_deref(),
        Some("broken by an operator: review")
    );
    let s = waiter.stats();
    assert_eq!(
        (s.hand_overs(), s.losses_broken(), s.losses()),
        (1, 1, 1),
        "{s}"
    );
    common::wait_until("the break is told", Duration::from_secs(10), || {
        changes
            .lock()
            .unwrap()
            .iter()
            .any(|c| c.2 == redmutex::LeaseChangeReason::Broken)
    });
    let fence = c.guard.fencing_token();
    assert!(c.guard.unlock().is_err());
    // Each read waits for its own locker's queued events.
    waiter.audit(None).unwrap();
    let trail: Vec<(String, u64)> = breaker
        .audit(None)
        .unwrap()
        .iter()
        .filter(|e| e.key() == k && e.fencing_token() == fence)
        .map(|e| (e.action().to_owned(), e.fencing_token()))
        .collect();
    assert_eq!(
        trail,
        [("grant".to_owned(), fence), ("break".to_owned(), fence)]
    );
}

/// `extend` called the moment a bare claim is returned (before its
/// take-up): the lease keeps the extended TTL whichever of the two comes
/// first, in Redis and in the guard.
#[test]
fn an_extend_during_the_claim_is_kept_by_the_take_up() {
    let server = Server::start();
    let (_proxy, _changes, holder, waiter) = slow_pair(&server);
    let long = Duration::from_secs(120);
    // The scripts run on the server before the extend and the take-up: both
    // cross the proxy (150 ms), so neither has arrived when it is read.
    let before = Mutex::new(0);
    let (k, c) = first_claimed(&server, &holder, &waiter, "extended-claim", &|g| {
        *before.lock().unwrap() = server.evalsha_calls();
        g.extend(long).unwrap();
    });
    let before = *before.lock().unwrap();
    common::wait_until(
        "the extend and the take-up ran",
        Duration::from_secs(10),
        || server.evalsha_calls() >= before + 2,
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&k)
        .query(&mut server.conn())
        .unwrap();
    assert!(pttl > 100_000, "PTTL {pttl} ms after extend(120 s)");
    assert!(c.guard.valid_until() > Instant::now() + Duration::from_secs(100));
    assert_eq!(c.guard.state(), LeaseState::Held);
    c.guard.unlock().unwrap();
}

/// A writer handed the write hold as a bare claim downgrades it at once
/// (before its take-up): the read hold has a full lease, and no writer
/// comes in meanwhile.
#[test]
fn a_write_claim_downgraded_before_its_take_up_gives_a_full_read_hold() {
    let server = Server::start();
    let (_proxy, _changes, holder, waiter) = slow_pair(&server);
    let other = server.locker();
    for round in 0..4 {
        let name = key(&format!("downgraded-claim-{round}"));
        let queue = format!("__redmutex__:rw-queue:{name}");
        let take = |l: &Locker| l.rwlock(&name).unwrap().write().unwrap();
        let Some(c) = claimed(&server, &holder, &waiter, &take, &queue, &|_| {}) else {
            continue;
        };
        // Before its take-up has come back (150 ms each way).
        let read = c.guard.downgrade().unwrap();
        assert!(
            read.valid_until() > Instant::now() + Duration::from_secs(20),
            "the read hold has {:?}",
            read.valid_until().saturating_duration_since(Instant::now())
        );
        let rw = other.rwlock(&name).unwrap();
        let busy = std::thread::scope(|s| s.spawn(|| rw.try_write().unwrap().is_none()).join());
        assert!(busy.unwrap(), "a writer came in over the read hold");
        assert_eq!(read.state(), LeaseState::Held);
        drop(read);
        return;
    }
    panic!("no round of four returned a bare claim");
}

/// The chosen candidate is gone (its stay ran out long ago, its entry
/// left in the queue ahead of a live candidate): it is not chosen,
/// `hand_over_to` says so, and the live candidate leads.
#[test]
fn hand_over_to_a_candidate_that_is_gone_gives_the_lead_to_the_live_head() {
    let server = Server::start();
    let name = key("gone-candidate");
    let leadership = server
        .locker()
        .election(&name)
        .unwrap()
        .campaign("v1")
        .unwrap();
    let (queue, waiters) = (
        format!("__redmutex__:election-queue:{name}"),
        format!("__redmutex__:election-waiters:{name}"),
    );
    let slow = server
        .builder()
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap();
    let election = slow.election(&name).unwrap();
    let live = std::thread::spawn(move || {
        election
            .campaign_timeout("other", Duration::from_secs(20))
            .unwrap()
    });
    common::wait_until("the live candidate queued", Duration::from_secs(10), || {
        common::queued_in(&server, &queue) == 1
    });
    let mut c = server.conn();
    let _: () = redis::cmd("ZADD")
        .arg(&queue)
        .arg(1)
        .arg("gone")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&waiters)
        .arg("gone")
        .arg("1000:2256:30000:v2")
        .query(&mut c)
        .unwrap();
    assert!(!leadership.hand_over_to("v2").unwrap());
    let next = live.join().unwrap();
    let leader = server.locker().election(&name).unwrap().leader().unwrap();
    assert_eq!(
        leader.map(|l| l.value().to_owned()).as_deref(),
        Some("other")
    );
    next.resign().unwrap();
}

/// Writers hammer a read-write lock (each writes its own mark under its
/// write hold) while one thread writes its mark and downgrades, again and
/// again: under the read hold the mark is still its own every time (no
/// writer came in between), and the read's token is above the write's.
#[test]
fn no_writer_comes_in_between_a_downgrade_under_heavy_contention() {
    let server = Server::start();
    let name = key("downgrade-heavy");
    let mark = key("downgrade-heavy-mark");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|i| {
            let (locker, name, mark) = (server.locker(), name.clone(), mark.clone());
            let stop = Arc::clone(&stop);
            let mut conn = server.conn();
            std::thread::Builder::new()
                .spawn(move || {
                    let rw = locker.rwlock(&name).unwrap();
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        let w = rw.write().unwrap();
                        let _: () = redis::cmd("SET")
                            .arg(&mark)
                            .arg(format!("writer-{i}"))
                            .query(&mut conn)
                            .unwrap();
                        drop(w);
                    }
                })
                .unwrap()
        })
        .collect();
    let locker = server.locker();
    let rw = locker.rwlock(&name).unwrap();
    let mut conn = server.conn();
    for round in 0..40 {
        let w = rw.write().unwrap();
        let mine = format!("downgrader-{round}");
        let _: () = redis::cmd("SET")
            .arg(&mark)
            .arg(&mine)
            .query(&mut conn)
            .unwrap();
        let wfence = w.fencing_token();
        let r = w.downgrade().unwrap();
        assert!(r.fencing_token() > wfence);
        let seen: String = redis::cmd("GET").arg(&mark).query(&mut conn).unwrap();
        assert!(!r.is_lost());
        assert_eq!(seen, mine, "a writer came in between (round {round})");
        drop(r);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
}

/// A bare claim unlocked while its take-up is on its way: `unlock` is
/// `Ok`, nothing is counted lost, the key is freed, and the trail has the
/// claim's grant and release.
#[test]
fn a_claim_unlocked_before_its_take_up_is_released_cleanly() {
    let server = Server::start();
    let (_proxy, changes, holder, waiter) = slow_pair(&server);
    let (k, c) = first_claimed(&server, &holder, &waiter, "unlocked-claim", &|_| {});
    let fence = c.guard.fencing_token();
    c.guard.unlock().unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg(&k)
        .query(&mut server.conn())
        .unwrap();
    assert!(!exists, "the claim's key outlived its unlock");
    let s = waiter.stats();
    assert_eq!((s.hand_overs(), s.losses()), (1, 0), "{s}");
    assert!(
        changes.lock().unwrap().is_empty(),
        "{:?}",
        changes.lock().unwrap()
    );
    // Read through the waiter: a read waits for its own locker's queued events.
    let trail: Vec<String> = waiter
        .audit(None)
        .unwrap()
        .iter()
        .filter(|e| e.key() == k && e.fencing_token() == fence)
        .map(|e| e.action().to_owned())
        .collect();
    assert_eq!(trail, ["grant", "release"]);
}
