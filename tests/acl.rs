//! Redis ACL users: a user without pub/sub rights (Redis 7's default for new
//! users) still releases, and its waiters still get the lock, through the
//! backoff; and the recipe in the README is enough for every operation.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use std::time::Duration;

use common::{key, Server};
use redmutex::{Backoff, Locker};

/// The README's recipe for a locker with prefix `jobs`, as sent to Redis.
const RECIPE: &[&str] = &[
    "on",
    ">secret",
    "resetkeys",
    "~jobs:*",
    "resetchannels",
    "&jobs:__redmutex__:released",
    "-@all",
    "+evalsha",
    "+eval",
    "+subscribe",
    "+unsubscribe",
    "+ping",
    "+quit",
    "+wait",
    "+time",
    "+get",
    "+set",
    "+del",
    "+exists",
    "+incr",
    "+pttl",
    "+pexpire",
    "+zadd",
    "+zrange",
    "+zrem",
    "+zpopmin",
    "+hget",
    "+hset",
    "+hdel",
    "+hgetall",
    "+hrandfield",
    "+publish",
    "+sadd",
    "+srem",
    "+smembers",
    "+sismember",
];

fn user(server: &Server, name: &str, rules: &[&str]) -> String {
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(name)
        .arg(rules)
        .exec(&mut server.conn())
        .unwrap();
    format!("redis://{name}:secret@127.0.0.1:{}/", server.port())
}

fn locker(url: &str, prefix: Option<&str>) -> Locker {
    let mut b = Locker::builder(redmutex::pool(url).unwrap())
        .backoff(Backoff::exponential(
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
        .ttl(Duration::from_secs(30));
    if let Some(p) = prefix {
        b = b.prefix(p);
    }
    b.build().unwrap()
}

/// Holds `k` with `a`, queues `b` behind it, releases, and returns what
/// `b` got. `queue` is the Redis key of the lock's queue.
fn hand_over(server: &Server, a: &Locker, b: &Locker, k: &str, queue: &str) -> u64 {
    let held = a.lock(k).unwrap();
    let waiter = {
        let (b, k) = (b.clone(), k.to_owned());
        std::thread::Builder::new()
            .spawn(move || {
                b.lock_timeout(&k, Duration::from_secs(20))
                    .map(|g| g.fencing_token())
            })
            .unwrap()
    };
    common::wait_until("the waiter is queued", Duration::from_secs(10), || {
        redis::cmd("ZCARD")
            .arg(queue)
            .query::<u64>(&mut server.conn())
            .unwrap()
            > 0
    });
    held.unlock().unwrap();
    waiter.join().unwrap().unwrap()
}

/// Log records of this test binary, as `target: message`.
static RECORDS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

struct Recorder;

impl log::Log for Recorder {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        RECORDS
            .lock()
            .unwrap()
            .push(format!("{}: {}", record.target(), record.args()));
    }
    fn flush(&self) {}
}

#[test]
fn a_user_without_channel_rights_unlocks_and_hands_over() {
    let _ = log::set_logger(&Recorder);
    log::set_max_level(log::LevelFilter::Trace);
    let server = Server::start();
    let url = user(
        &server,
        "nochannels",
        &["on", ">secret", "~*", "+@all", "resetchannels"],
    );
    let (a, b) = (locker(&url, None), locker(&url, None));
    let k = key("acl");
    // A plain lock and unlock.
    a.lock(&k).unwrap().unlock().unwrap();
    // A waiter gets the lock after a release, by its backoff.
    let token = hand_over(&server, &a, &b, &k, &common::queue_keys(None, &k).0);
    assert!(token > 0);
    // The lock is free afterwards (nothing was left half done).
    assert!(a.holder(&k).unwrap().is_none());
    // The waiting locker said once that it polls instead.
    let said: Vec<String> = RECORDS
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.starts_with("redmutex::listen") && r.contains("refused"))
        .cloned()
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
}

#[test]
fn the_readme_recipe_is_enough() {
    let server = Server::start();
    // Redis 6.2 does not know `quit` as an ACL command (it always allows
    // it), and refuses the rule; the README says so.
    let recipe: Vec<&str> = match redmutex_testkit::server_version() {
        Some((major, _)) if major < 7 => RECIPE.iter().copied().filter(|r| *r != "+quit").collect(),
        _ => RECIPE.to_vec(),
    };
    let url = user(&server, "locker", &recipe);
    let (a, b) = (locker(&url, Some("jobs")), locker(&url, Some("jobs")));
    let k = key("recipe");
    let g = a.lock(&k).unwrap();
    assert!(a.holder(&k).unwrap().is_some());
    g.extend(Duration::from_secs(10)).unwrap();
    g.unlock().unwrap();
    assert!(a.try_lock_all(&[&k, "other"]).unwrap().is_some());
    let token = hand_over(&server, &a, &b, &k, &common::queue_keys(Some("jobs"), &k).0);
    assert!(token > 0);
    // A semaphore and a read-write lock need nothing more.
    let sem = a.semaphore(&k, 2).unwrap();
    let permit = sem.acquire().unwrap();
    assert_eq!(sem.available_permits().unwrap(), 1);
    permit.extend(Duration::from_secs(10)).unwrap();
    permit.unlock().unwrap();
    let rw = b.rwlock(&k).unwrap();
    let read = rw.read().unwrap();
    read.extend(Duration::from_secs(10)).unwrap();
    assert!(common::elsewhere(|| rw.try_write().unwrap().is_none()));
    read.unlock().unwrap();
    rw.write().unwrap().unlock().unwrap();
    // Nothing else is reachable with it.
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    assert!(redis::cmd("GET")
        .arg("elsewhere")
        .query::<Option<String>>(&mut c)
        .is_err());
}

/// An election needs the README's recipe and its stream commands.
#[test]
fn an_election_needs_the_recipe_and_the_stream_commands() {
    let server = Server::start();
    let mut recipe: Vec<&str> = match redmutex_testkit::server_version() {
        Some((major, _)) if major < 7 => RECIPE.iter().copied().filter(|r| *r != "+quit").collect(),
        _ => RECIPE.to_vec(),
    };
    recipe.extend(["+xadd", "+xrange", "+xrevrange", "+xread"]);
    let url = user(&server, "elector", &recipe);
    let a = locker(&url, Some("jobs"));
    let election = a.election(key("recipe")).unwrap();
    let mut observer = election.observe().unwrap();
    assert!(observer.next().unwrap().unwrap().is_none());
    let leadership = election.campaign("a").unwrap();
    leadership.proclaim("b").unwrap();
    assert_eq!(election.leader().unwrap().unwrap().value(), "b");
    leadership.resign().unwrap();
    let values = common::observed(&mut observer, 3);
    assert_eq!(values, [Some("a".into()), Some("b".into()), None]);
}
