//! The checker's rules on histories made up for them, run before any
//! scenario: each must find what it is there for, and excuse what it must.

use crate::history::{self, check, rule, Event, Kind, WorkerLog, READ_SUFFIX};
use crate::support::limits;
use crate::worker::RW_NAME;
use crate::IO;

/// Every self-check, in turn (each panics when its rule is wrong).
pub(crate) fn all() {
    checker_knows_readers_from_writers();
    checker_explains_an_evicted_readers_set();
    checker_wants_demand_for_a_takeover();
    checker_times_a_loss_from_the_eviction_of_its_own_key();
}

/// The read-write rule on histories made up for it, before any run: read
/// holds may overlap each other, never a write hold.
fn checker_knows_readers_from_writers() {
    use history::{line, Op};
    let read = format!("{RW_NAME}{READ_SUFFIX}");
    // One section from `from` to `to` ms, fenced read and write done.
    let held = |key: &str, token: u64, from: u64, to: u64| {
        let ms = |t: u64| t * history::MS;
        let writes = if key == RW_NAME { Op::Ok } else { Op::Skipped };
        [
            line::enter(key, token, ms(from), ms(from)),
            line::read(key, token, ms(from)),
            line::exit(key, token, ms(to), Op::Ok, writes, ms(to), false),
            line::unlock(key, token, ms(to), history::Unlock::Ok),
            line::end(ms(to), 0),
        ]
        .concat()
    };
    let limits = limits(IO);
    let verdict = |texts: &[String]| {
        let logs: Vec<WorkerLog> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| WorkerLog::parse(u32::try_from(i).unwrap(), t))
            .collect();
        check(&logs, &[], &limits, false, false)
    };
    let readers = verdict(&[held(&read, 1, 0, 10), held(&read, 2, 5, 15)]);
    assert!(readers.violations.is_empty(), "{:?}", readers.violations);
    for (first, second) in [(read.as_str(), RW_NAME), (RW_NAME, read.as_str())] {
        let mixed = verdict(&[held(first, 1, 0, 10), held(second, 2, 5, 15)]);
        assert_eq!(
            mixed.count(rule::EXCLUSION),
            1,
            "a {first} hold overlapping a {second} hold: {:?}",
            mixed.violations
        );
    }
}

/// The set of read holds evicted while a reader's key stays lets a writer
/// in (issue 38, hole 9): a reader whose release said it had lost the hold
/// is a victim of the eviction, and the overlap is excused; one whose
/// release said `Ok` is a violation, and its report names the eviction
/// and both sections, with their times against the writer's entry.
fn checker_explains_an_evicted_readers_set() {
    use history::{line, Op, Unlock};
    let read = format!("{RW_NAME}{READ_SUFFIX}");
    let ms = |t: u64| t * history::MS;
    let reader = |unlock: Unlock| {
        [
            line::enter(&read, 1, ms(100), ms(99)),
            line::read(&read, 1, ms(100)),
            line::exit(&read, 1, ms(104), Op::Ok, Op::Skipped, ms(104), false),
            line::unlock(&read, 1, ms(105), unlock),
            line::end(ms(200), 0),
        ]
        .concat()
    };
    let writer = [
        line::enter(RW_NAME, 2, ms(102), ms(101)),
        line::read(RW_NAME, 2, ms(102)),
        line::exit(RW_NAME, 2, ms(106), Op::Ok, Op::Ok, ms(106), false),
        line::unlock(RW_NAME, 2, ms(107), Unlock::Ok),
        line::end(ms(200), 0),
    ]
    .concat();
    let eviction = Event {
        kind: Kind::Evict,
        start: ms(50),
        end: ms(150),
        worker: None,
        victims: Vec::new(),
        loses: true,
        masters: vec![0],
        evicted: vec![(read.clone(), ms(101))],
    };
    let limits = limits(IO);
    let verdict = |unlock: Unlock| {
        let logs = vec![
            WorkerLog::parse(0, &reader(unlock)),
            WorkerLog::parse(1, &writer),
        ];
        let v = check(
            &logs,
            std::slice::from_ref(&eviction),
            &limits,
            false,
            false,
        );
        let why: Vec<String> = v
            .violations
            .iter()
            .map(|x| history::explain(x, &logs, std::slice::from_ref(&eviction), &limits))
            .collect();
        (v, why)
    };
    let (told, _) = verdict(Unlock::Lost);
    assert_eq!(told.count(rule::EXCLUSION), 0, "{:?}", told.violations);
    assert_eq!(told.excused_total(), 1);
    let (untold, why) = verdict(Unlock::Ok);
    assert_eq!(untold.count(rule::EXCLUSION), 1, "{:?}", untold.violations);
    let why = why.concat();
    for part in [
        "fault: maxmemory volatile-ttl",
        "evicted (heard) rw.r at -1.0 ms",
        "* w0 rw.r token 1: asked -3.0 ms, entered -2.0 ms",
        "unlock +3.0 ms ok",
        "* w1 rw token 2",
    ] {
        assert!(why.contains(part), "{part:?} missing from:\n{why}");
    }
}

/// A lock never held again after the first release that followed a
/// waiter's kill is a [takeover] violation only when someone wanted it: a
/// live worker's lock call on it that waited past the bound. A run that
/// goes on with other keys only (every live worker busy elsewhere, as with
/// random keys and long backoffs) proves nothing.
fn checker_wants_demand_for_a_takeover() {
    use history::{line, Op, Unlock};
    let ms = |t: u64| t * history::MS;
    let held = |key: &str, token: u64, from: u64, to: u64| {
        [
            line::enter(key, token, ms(from), ms(from)),
            line::read(key, token, ms(from)),
            line::exit(key, token, ms(to), Op::Ok, Op::Ok, ms(to), false),
            line::unlock(key, token, ms(to), Unlock::Ok),
        ]
        .concat()
    };
    let kill = Event {
        kind: Kind::KillWaiter,
        start: ms(1_000),
        end: ms(1_002),
        worker: Some(0),
        victims: Vec::new(),
        loses: true,
        masters: Vec::new(),
        evicted: Vec::new(),
    };
    // k1 released 5 s after the kill, then only k0 taken (in turn), for
    // 20 s more.
    let releaser = [held("k1", 1, 5_990, 6_000), line::end(ms(30_000), 0)].concat();
    let busy: String = (0..40)
        .map(|i| held("k0", 10 + i, 6_100 + i * 500, 6_500 + i * 500))
        .collect();
    let limits = limits(IO);
    let verdict = |others: &str| {
        let logs = vec![
            WorkerLog::parse(0, ""),
            WorkerLog::parse(1, &releaser),
            WorkerLog::parse(
                2,
                &[busy.as_str(), others, &line::end(ms(30_000), 0)].concat(),
            ),
        ];
        check(&logs, std::slice::from_ref(&kill), &limits, false, false)
    };
    let idle = verdict("");
    assert_eq!(idle.count(rule::TAKEOVER), 0, "{:?}", idle.violations);
    // A k1 call asked just after the release, failed 10 s later.
    let wanted = verdict(&line::failed(ms(16_001), "timeout", "k1", ms(6_001)));
    assert_eq!(wanted.count(rule::TAKEOVER), 1, "{:?}", wanted.violations);
    // Held again late, but asked for only just before (long run H1, Redlock
    // soak: k0 held again 871.5 ms after the release, every live worker's
    // next call on it asked 867 ms after the release): the lock was free
    // and nobody wanted it, no violation.
    let late_ask = [
        line::enter("k1", 90, ms(9_010), ms(9_000)),
        line::read("k1", 90, ms(9_010)),
        line::exit("k1", 90, ms(9_020), Op::Ok, Op::Ok, ms(9_020), false),
        line::unlock("k1", 90, ms(9_020), Unlock::Ok),
    ]
    .concat();
    let asked_late = verdict(&late_ask);
    assert_eq!(
        asked_late.count(rule::TAKEOVER),
        0,
        "{:?}",
        asked_late.violations
    );
    // Asked just after the release and held only 3 s later: a violation.
    let asked_early = [
        line::enter("k1", 90, ms(9_010), ms(6_001)),
        line::read("k1", 90, ms(9_010)),
        line::exit("k1", 90, ms(9_020), Op::Ok, Op::Ok, ms(9_020), false),
        line::unlock("k1", 90, ms(9_020), Unlock::Ok),
    ]
    .concat();
    let slow = verdict(&asked_early);
    assert_eq!(slow.count(rule::TAKEOVER), 1, "{:?}", slow.violations);
}

/// An eviction heard just before a holder recorded its entry took the
/// previous holder's key (the newer one's `SET NX` came right after it)
/// when the newer key is evicted later with nobody entering in between:
/// the newer holder's loss is timed from that later eviction (chaos-long,
/// soak mixed: `slow` token 1795621640004510, told at its second renewal,
/// 129 ms after its key went, was reported 669 ms late, timed from the
/// eviction of the holder before it). Told too late after its own key's
/// eviction, it is still a violation.
fn checker_times_a_loss_from_the_eviction_of_its_own_key() {
    use history::{line, Op, Unlock};
    let ms = |t: u64| t * history::MS;
    let held = |token: u64, asked: u64, from: u64, told: u64| {
        [
            line::enter("k0", token, ms(from), ms(asked)),
            line::read("k0", token, ms(from)),
            line::lost("k0", token, ms(told)),
            line::exit("k0", token, ms(told), Op::Ok, Op::Rejected, ms(told), true),
            line::unlock("k0", token, ms(told), Unlock::Lost),
            line::end(ms(3000), 0),
        ]
        .concat()
    };
    let eviction = |start: u64, end: u64, at: u64| Event {
        kind: Kind::Evict,
        start: ms(start),
        end: ms(end),
        worker: None,
        victims: Vec::new(),
        loses: true,
        masters: vec![0],
        evicted: vec![("k0".to_owned(), ms(at))],
    };
    // The older holder's key is evicted at 200 ms (it is told at its first
    // renewal); the newer one enters 2 ms after that is heard, and its own
    // key is evicted at 740 ms.
    let events = [eviction(50, 311, 200), eviction(739, 1500, 740)];
    let limits = limits(IO);
    let verdict = |told: u64| {
        let logs = vec![
            WorkerLog::parse(0, &held(1, 99, 100, 433)),
            WorkerLog::parse(1, &held(2, 150, 202, told)),
        ];
        check(&logs, &events, &limits, false, false)
    };
    // Told at its second renewal, 129 ms after its key was evicted.
    let timely = verdict(869);
    assert_eq!(
        timely.count(rule::LOSS_REPORT),
        0,
        "{:?}",
        timely.violations
    );
    // Told 600 ms after its key was evicted: late.
    let late = verdict(1340);
    assert_eq!(late.count(rule::LOSS_REPORT), 1, "{:?}", late.violations);
}
