//! A hold named through another prefix (issue 43): a lock key does not say
//! its prefix (`jobs:nr` is lock `nr` of prefix `jobs`, or lock `jobs:nr`
//! of no prefix), so an operator's locker of another prefix (none, an
//! outer one, a nested one) must find the hold under its own prefix: read
//! its waiters there, break it as its own prefix would (its holder told
//! the operator's reason, the break in that prefix's audit trail), and
//! write nothing under a prefix that holds nothing; or change nothing.
// Test helpers fail loudly: that is the point.
#![allow(
    clippy::disallowed_methods,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::thread::JoinHandle;
use std::time::Duration;

use common::{dump, key, redlock_builder, servers, wait_until, Cluster, Server};
use redmutex::{Builder, Error, Guard, Locker};

/// A locker of `builder` with `prefix` (none: `None`) and `metadata`, a
/// short TTL (renewals every 300 ms).
fn build(builder: Builder, prefix: Option<&str>, metadata: &str) -> Locker {
    let mut b = builder.metadata(metadata).ttl(Duration::from_millis(900));
    if let Some(p) = prefix {
        b = b.prefix(p);
    }
    b.build().unwrap()
}

/// A locker of `prefix` over `server` (see [`build`]).
fn locker(server: &Server, prefix: Option<&str>, metadata: &str) -> Locker {
    build(server.builder(), prefix, metadata)
}

/// `b` waiting for `key` on a thread (up to 30 s), once `a` sees it queued.
fn lock_behind(a: &Locker, b: &Locker, key: &str) -> JoinHandle<Result<Guard, Error>> {
    let (b, k) = (b.clone(), key.to_owned());
    let waiting = std::thread::spawn(move || b.lock_timeout(&k, Duration::from_secs(30)));
    wait_until("the waiter queued", Duration::from_secs(20), || {
        a.holder(key)
            .unwrap()
            .is_some_and(|i| i.waiters().len() == 1)
    });
    waiting
}

/// The keys of no prefix's own (`__redmutex__:...`) in `keys`.
fn at_the_root(keys: impl IntoIterator<Item = String>) -> Vec<String> {
    keys.into_iter()
        .filter(|k| k.starts_with("__redmutex__:"))
        .collect()
}

/// Asserts that `held` learns, within 5 s, that it was broken for `reason`.
fn told(held: &Guard, reason: &str) {
    assert!(held.wait_lost(Duration::from_secs(5)), "not told");
    assert_eq!(
        held.lost_reason().as_deref(),
        Some(format!("broken by an operator: {reason}").as_str()),
        "the holder was not told the operator's reason"
    );
}

/// Lock `nr` of a prefix of its own held by `alpha`, `beta` queued for it
/// (of the same prefix), and an operator's locker without a prefix.
struct Queued {
    a: Locker,
    root: Locker,
    held: Guard,
    waiting: JoinHandle<Result<Guard, Error>>,
    /// The prefix, and the lock's whole key, `<prefix>:nr`.
    jobs: String,
    full: String,
}

fn queued(server: &Server) -> Queued {
    let jobs = key("jobs");
    let (a, b) = (
        locker(server, Some(&jobs), "alpha"),
        locker(server, Some(&jobs), "beta"),
    );
    let held = a.lock("nr").unwrap();
    let waiting = lock_behind(&a, &b, "nr");
    Queued {
        root: locker(server, None, "operator"),
        full: format!("{jobs}:nr"),
        a,
        held,
        waiting,
        jobs,
    }
}

#[test]
fn a_lock_read_by_its_full_key_without_a_prefix_shows_its_waiters() {
    // On 7013b77: `redmutex holder jobs:nr` and `redmutex list` (no prefix)
    // said 0 waiting for a lock of prefix `jobs` with waiters: they read
    // the queue of no prefix.
    let server = Server::start();
    let q = queued(&server);
    let info = q.root.holder(&q.full).unwrap().unwrap();
    assert_eq!(info.waiters(), ["beta"], "holder: {info:?}");
    let list = q.root.locks().unwrap();
    let listed = list.iter().find(|i| i.key() == q.full).unwrap();
    assert_eq!(listed.waiters(), ["beta"], "locks: {list:?}");
    drop(q.held);
    drop(q.waiting.join().unwrap().unwrap());
}

#[test]
fn a_lock_broken_by_its_full_key_without_a_prefix_is_broken_as_its_own_prefix_would() {
    // On 7013b77: `redmutex break jobs:nr` freed the key, but its holder
    // was told "the key gone or someone else's", the waiters were not
    // handed it, the break went to the trail of no prefix, and no prefix's
    // counter and marks appeared at the root of the database.
    let server = Server::start();
    let q = queued(&server);
    let broken = q.root.break_lock(&q.full, "host gone").unwrap().unwrap();
    assert_eq!(broken.metadata(), "alpha");
    assert_eq!(broken.waiters(), ["beta"], "{broken:?}");
    // Handed to the waiter, as its own prefix's break (or release) does.
    let next = q.a.holder("nr").unwrap().unwrap();
    assert_eq!(next.metadata(), "beta");
    told(&q.held, "host gone");
    let trail = q.a.audit(None).unwrap();
    assert!(
        trail
            .iter()
            .any(|e| e.action() == "break" && e.key() == "nr" && e.reason() == "host gone"),
        "the break is not in the trail of {}: {trail:?}",
        q.jobs
    );
    assert_eq!(
        at_the_root(dump(&server).into_iter().map(|(k, _)| k)),
        [] as [String; 0]
    );
    drop(q.waiting.join().unwrap().unwrap());
}

#[test]
fn a_permit_of_a_nested_prefix_is_listed_by_the_outer_one_and_broken_by_that_name() {
    // The outer prefix's listing walks the keys of the prefixes nested in
    // it: their permits, read-write holds and leaders are holds too, named
    // by the listing so that a break of that name finds them.
    let server = Server::start();
    let outer = key("outer");
    let inner = locker(&server, Some(&format!("{outer}:team")), "alpha");
    let operator = locker(&server, Some(&outer), "operator");
    let permit = inner.semaphore("slots", 1).unwrap().acquire().unwrap();
    let list = operator.locks().unwrap();
    let listed = list
        .iter()
        .find(|i| i.name() == "slots")
        .unwrap_or_else(|| panic!("the nested permit is not listed: {list:?}"));
    let name = listed.key().to_owned();
    assert_eq!(name, "team:__redmutex__:permit:0:slots");
    operator.break_lock(&name, "drain").unwrap().unwrap();
    told(&permit, "drain");
}

#[test]
fn a_lock_whose_prefix_cannot_be_told_is_left_alone() {
    // A value like a hold's, with an expiry, under a key whose possible
    // prefixes (`x`, none) never granted a token: nothing says which
    // prefix's marks its holder would read, so the break changes nothing.
    let server = Server::start();
    let a = locker(&server, Some(&key("real")), "alpha");
    let held = a.lock("k").unwrap();
    let mut c = server.conn();
    let value: String = redis::cmd("GET")
        .arg(format!("{}:k", key("real")))
        .query(&mut c)
        .unwrap();
    redis::cmd("SET")
        .arg("x:copy")
        .arg(&value)
        .arg("PX")
        .arg(60_000)
        .exec(&mut c)
        .unwrap();
    let before = dump(&server);
    let root = locker(&server, None, "operator");
    let result = root.break_lock("x:copy", "stuck");
    assert!(matches!(result, Err(Error::InvalidInput(_))), "{result:?}");
    assert_eq!(dump(&server), before, "something changed");
    held.ensure_held().unwrap();
}

#[test]
fn a_lock_of_an_outer_prefix_named_through_a_nested_one_tells_its_holder() {
    // Both `<p>` and `<p>:x` have granted tokens up to this lock's: its key
    // `<p>:x:k` may be lock `x:k` of `<p>` (it is) or lock `k` of `<p>:x`.
    // Whichever the break takes it for, its holder is told the reason.
    let server = Server::start();
    let p = key("amb");
    let outer = locker(&server, Some(&p), "alpha");
    let held = outer.lock("x:k").unwrap();
    let nested = locker(&server, Some(&format!("{p}:x")), "beta");
    drop(nested.lock("other").unwrap());
    let root = locker(&server, None, "operator");
    root.break_lock(format!("{p}:x:k"), "stuck")
        .unwrap()
        .unwrap();
    told(&held, "stuck");
}

/// Lock `nr` of a prefix, taken by a locker of `builder()`, broken by its
/// whole key from one without a prefix: its holder is told the reason.
fn broken_from_no_prefix(builder: &dyn Fn() -> Builder) {
    let jobs = key("jobs");
    let (a, root) = (
        build(builder(), Some(&jobs), "alpha"),
        build(builder(), None, "operator"),
    );
    let held = a.lock("nr").unwrap();
    root.break_lock(format!("{jobs}:nr"), "host gone")
        .unwrap()
        .unwrap();
    told(&held, "host gone");
}

#[test]
fn on_a_cluster_a_lock_broken_by_its_full_key_without_a_prefix_tells_its_holder() {
    // The prefixes a key may be under each have their counter and marks in
    // the key's slot: a break from no prefix reads and writes them there.
    let cluster = Cluster::start();
    broken_from_no_prefix(&|| Locker::builder(cluster.pool()));
    assert_eq!(at_the_root(cluster.all_keys()), [] as [String; 0]);
}

#[test]
fn on_redlock_a_lock_broken_by_its_full_key_without_a_prefix_tells_its_holder() {
    let masters = servers(3);
    broken_from_no_prefix(&|| redlock_builder(&masters));
    for m in &masters {
        assert_eq!(
            at_the_root(dump(m).into_iter().map(|(k, _)| k)),
            [] as [String; 0]
        );
    }
}

#[test]
fn each_hold_and_event_says_its_prefix_and_its_name_there() {
    // `LockInfo::prefix` and `key_in_prefix`, `AuditEntry::prefix`, and
    // `audit_all` over a prefix's trails and those nested in it (every
    // prefix's without one), as a locker of each names them.
    let server = Server::start();
    let jobs = key("jobs");
    let team = format!("{jobs}:team");
    let other = key("other");
    let (a, b, c, root) = (
        locker(&server, Some(&jobs), "alpha"),
        locker(&server, Some(&team), "beta"),
        locker(&server, Some(&other), "gamma"),
        locker(&server, None, "operator"),
    );
    let held = (
        a.lock("nr").unwrap(),
        b.lock("nr").unwrap(),
        b.semaphore("slots", 1).unwrap().acquire().unwrap(),
        c.lock("nr").unwrap(),
        root.lock("solo").unwrap(),
    );
    // (name here, prefix, name there) of each hold `locker` lists.
    let listed = |locker: &Locker| -> Vec<(String, Option<String>, String)> {
        locker
            .locks()
            .unwrap()
            .iter()
            .map(|i| {
                let prefix = i.prefix().map(str::to_owned);
                (i.key().to_owned(), prefix, i.key_in_prefix().to_owned())
            })
            .collect()
    };
    let permit = "__redmutex__:permit:0:slots";
    let want = |name: &str, prefix: Option<&str>, there: &str| {
        (name.to_owned(), prefix.map(str::to_owned), there.to_owned())
    };
    // Sorted by the name here, as `locks` promises.
    let sorted = |mut v: Vec<(String, Option<String>, String)>| {
        v.sort();
        v
    };
    assert_eq!(
        listed(&a),
        sorted(vec![
            want("nr", Some(&jobs), "nr"),
            want("team:nr", Some(&team), "nr"),
            want(&format!("team:{permit}"), Some(&team), permit),
        ])
    );
    assert_eq!(
        listed(&root),
        sorted(vec![
            want(&format!("{jobs}:nr"), Some(&jobs), "nr"),
            want(&format!("{team}:nr"), Some(&team), "nr"),
            want(&format!("{team}:{permit}"), Some(&team), permit),
            want(&format!("{other}:nr"), Some(&other), "nr"),
            want("solo", None, "solo"),
        ])
    );
    // A break through any of them lands in the trail of the hold's prefix.
    root.break_lock(format!("{team}:nr"), "one")
        .unwrap()
        .unwrap();
    a.break_lock("nr", "two").unwrap().unwrap();
    c.break_lock("nr", "three").unwrap().unwrap();
    root.break_lock("solo", "four").unwrap().unwrap();
    let trail = |events: Vec<redmutex::AuditEntry>| -> Vec<(Option<String>, String, String)> {
        events
            .into_iter()
            .map(|e| {
                (
                    e.prefix().map(str::to_owned),
                    e.key().to_owned(),
                    e.reason().to_owned(),
                )
            })
            .collect()
    };
    let event = |prefix: Option<&str>, reason: &str| {
        (
            prefix.map(str::to_owned),
            "nr".to_owned(),
            reason.to_owned(),
        )
    };
    assert_eq!(trail(b.audit(None).unwrap()), [event(Some(&team), "one")]);
    // In the order of their times; two trails' events of one millisecond
    // in either order.
    let nested = a.audit_all(None).unwrap();
    assert!(nested.windows(2).all(|w| w[0].time() <= w[1].time()));
    let mut nested = trail(nested);
    nested.sort();
    assert_eq!(
        nested,
        [event(Some(&jobs), "two"), event(Some(&team), "one")]
    );
    let everywhere = root.audit_all(None).unwrap();
    assert!(everywhere.windows(2).all(|w| w[0].time() <= w[1].time()));
    let mut everywhere = trail(everywhere);
    assert_eq!(everywhere.len(), 4, "{everywhere:?}");
    everywhere.sort();
    let mut expected = vec![
        event(Some(&team), "one"),
        event(Some(&jobs), "two"),
        event(Some(&other), "three"),
        (None, "solo".to_owned(), "four".to_owned()),
    ];
    expected.sort();
    assert_eq!(everywhere, expected);
    drop(held);
}

#[test]
fn a_locker_of_a_prefix_breaks_no_hold_of_an_outer_one() {
    // A locker of `<jobs>` looks under its prefix and those nested in it
    // only. Lock `<jobs>:nr` of no prefix is not `<jobs>`'s (its counter
    // never granted a token): its break through `<jobs>` changes nothing,
    // and tells why, rather than mark it where its holder never looks.
    let server = Server::start();
    let jobs = key("jobs");
    let root = locker(&server, None, "alpha");
    let held = root.lock(format!("{jobs}:nr")).unwrap();
    let operator = locker(&server, Some(&jobs), "operator");
    let before = dump(&server);
    let result = operator.break_lock("nr", "stuck");
    assert!(matches!(result, Err(Error::InvalidInput(_))), "{result:?}");
    assert_eq!(dump(&server), before, "something changed");
    held.ensure_held().unwrap();
}

#[test]
fn a_lock_of_an_outer_prefix_broken_through_a_busy_nested_one_tells_its_holder_or_changes_nothing()
{
    // As above, but `<jobs>` has granted a token since `<jobs>:nr` was
    // taken without a prefix (a locker of `<jobs>` took any lock at all):
    // its counter has reached the hold's token. On 1cf7f9e the break went
    // through as `<jobs>`'s, its mark left with `<jobs>` alone, and the
    // holder (of no prefix) was told "Redis showed the key gone or someone
    // else's", as before issue 43. Whatever `break_lock` is given, the
    // holder is told the operator's reason, or nothing changes.
    let server = Server::start();
    let jobs = key("jobs");
    let root = locker(&server, None, "alpha");
    let held = root.lock(format!("{jobs}:nr")).unwrap();
    let operator = locker(&server, Some(&jobs), "operator");
    drop(operator.lock("other").unwrap());
    let before = dump(&server);
    match operator.break_lock("nr", "stuck") {
        Ok(Some(_)) => told(&held, "stuck"),
        Err(Error::InvalidInput(m)) => {
            assert_eq!(
                dump(&server),
                before,
                "refused ({m}), yet something changed"
            );
            assert!(m.contains("no prefix"), "where it is held is not said: {m}");
            held.ensure_held().unwrap();
        }
        other => panic!("{other:?}"),
    }
}

#[test]
#[ignore = "defect: a lock key under two prefixes whose fencing counters both reached its \
            token (`<p>`'s `x:k` and `<p>:x`'s `k`, both busy) is taken for the longest \
            prefix's: its waiters read and handed over, its break audited, under the wrong \
            prefix. Counters cannot tell (tokens are server-clock microseconds, so a busy \
            prefix's counter passes every older hold's): the grant must record its prefix \
            (the hold's value, written by the acquire scripts: a hot-path change)"]
fn a_lock_of_an_outer_prefix_with_a_busy_nested_one_is_read_and_broken_under_its_own() {
    // `<p>` holds lock `x:k` (key `<p>:x:k`) with a waiter; then `<p>:x`
    // takes and frees any lock. On 1cf7f9e the hold is read as lock `k` of
    // `<p>:x`, 0 waiting, by its own locker of `<p>` too; a break hands it
    // to nobody of `<p>`'s queue and writes its event to `<p>:x`'s trail.
    let server = Server::start();
    let p = key("busy");
    let (a, b) = (
        locker(&server, Some(&p), "alpha"),
        locker(&server, Some(&p), "beta"),
    );
    let held = a.lock("x:k").unwrap();
    let waiting = lock_behind(&a, &b, "x:k");
    let nested = locker(&server, Some(&format!("{p}:x")), "gamma");
    drop(nested.lock("other").unwrap());

    let info = a.holder("x:k").unwrap().unwrap();
    assert_eq!(
        (info.prefix(), info.key_in_prefix(), info.waiters()),
        (Some(p.as_str()), "x:k", &["beta".to_owned()][..]),
        "read by its own locker: {info:?}"
    );
    let root = locker(&server, None, "operator");
    let broken = root
        .break_lock(format!("{p}:x:k"), "stuck")
        .unwrap()
        .unwrap();
    assert_eq!(
        (broken.prefix(), broken.waiters()),
        (Some(p.as_str()), &["beta".to_owned()][..]),
        "{broken:?}"
    );
    told(&held, "stuck");
    assert_eq!(a.holder("x:k").unwrap().unwrap().metadata(), "beta");
    assert!(
        a.audit(None).unwrap().iter().any(|e| e.reason() == "stuck"),
        "the break is not in the trail of {p}"
    );
    assert_eq!(nested.audit(None).unwrap().len(), 0, "audited under {p}:x");
    drop(waiting.join().unwrap().unwrap());
}

#[test]
fn an_operator_kept_to_its_prefix_by_an_acl_reads_and_breaks_its_holds() {
    // A lock key may be held under an outer prefix or none, so a locker of
    // `<jobs>` also looks at their counters; a user an ACL keeps to
    // `<jobs>:*` may not name those keys (the server refuses the whole
    // script): it reads and breaks the holds of its own prefix as before.
    let server = Server::start();
    let jobs = key("jobs");
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("jobsop")
        .arg(&["on", ">secret", "resetkeys", &format!("~{jobs}:*"), "+@all"])
        .exec(&mut server.conn())
        .unwrap();
    let url = format!("redis://jobsop:secret@127.0.0.1:{}/", server.port());
    let operator = build(
        Locker::builder(redmutex::pool(&url).unwrap()),
        Some(&jobs),
        "operator",
    );
    let a = locker(&server, Some(&jobs), "alpha");
    let held = a.lock("nr").unwrap();
    let info = operator.holder("nr").unwrap().unwrap();
    assert_eq!(
        (info.prefix(), info.metadata()),
        (Some(jobs.as_str()), "alpha")
    );
    let listed = operator.locks().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    operator.break_lock("nr", "acl").unwrap().unwrap();
    told(&held, "acl");
}
