//! Guarded writes (`Guard::run_if_held`): commands that run on the lock's
//! server only while the guard still holds its lock, inside one script.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)] // test helpers fail loudly: that is the point
#![allow(clippy::disallowed_methods)] // the paused holders sleep on purpose: the pause is the fault

mod common;

use std::time::Duration;

use common::{
    key, lock_as_someone_else, redlock_builder, reserved, servers, wait_until, Cluster, Server,
};
use redis::Value;
use redmutex::{Error, Locker};

fn get(server: &Server, k: &str) -> Option<String> {
    redis::cmd("GET").arg(k).query(&mut server.conn()).unwrap()
}

fn exists(server: &Server, k: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(k)
        .query::<i64>(&mut server.conn())
        .unwrap()
        == 1
}

fn is_lost(r: Result<Vec<Value>, Error>) -> bool {
    matches!(r, Err(Error::Lost { .. }))
}

#[test]
fn guarded_commands_run_in_order_while_held() {
    let server = Server::start();
    let locker = server.locker();
    let (k, data, count) = (key("g-held"), key("g-held-data"), key("g-held-count"));
    let guard = locker.lock(&k).unwrap();
    let mut p = redis::pipe();
    p.set(&data, "v1")
        .incr(&count, 2)
        .get(&data)
        .get(key("g-held-none"));
    let replies = guard.run_if_held(&p).unwrap();
    assert_eq!(
        replies,
        vec![
            Value::Okay,
            Value::Int(2),
            Value::BulkString(b"v1".to_vec()),
            Value::Nil
        ]
    );
    // An empty pipeline checks the lock and runs nothing.
    assert_eq!(
        guard.run_if_held(&redis::pipe()).unwrap(),
        Vec::<Value>::new()
    );
    // `.atomic()` changes nothing: the script is atomic already.
    let mut atomic = redis::pipe();
    atomic.atomic().incr(&count, 1).incr(&count, 1);
    assert_eq!(
        guard.run_if_held(&atomic).unwrap(),
        vec![Value::Int(3), Value::Int(4)]
    );
    // Replies of commands marked `ignore()` are left out, as `query` does.
    let mut ignored = redis::pipe();
    ignored
        .incr(&count, 1)
        .ignore()
        .get(&data)
        .incr(&count, 1)
        .ignore();
    assert_eq!(
        guard.run_if_held(&ignored).unwrap(),
        vec![Value::BulkString(b"v1".to_vec())]
    );
    let mut both = redis::pipe();
    both.atomic().incr(&count, 1).ignore().incr(&count, 1);
    assert_eq!(guard.run_if_held(&both).unwrap(), vec![Value::Int(8)]);
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
}

#[test]
fn a_deleted_key_runs_nothing_and_the_guard_is_lost() {
    let server = Server::start();
    let locker = server.locker();
    let (k, data) = (key("g-del"), key("g-del-data"));
    let guard = locker.lock(&k).unwrap();
    let _: () = redis::cmd("DEL").arg(&k).query(&mut server.conn()).unwrap();
    let mut p = redis::pipe();
    p.set(&data, "late");
    assert!(is_lost(guard.run_if_held(&p)));
    assert!(!exists(&server, &data), "nothing may run");
    assert!(guard.is_lost(), "the guard is marked lost");
    // Once lost, always refused, even with the lock free again.
    assert!(is_lost(guard.run_if_held(&p)));
    assert!(!exists(&server, &data));
}

#[test]
fn an_expired_key_runs_nothing() {
    let server = Server::start();
    let locker = server
        .builder()
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .build()
        .unwrap();
    let (k, data) = (key("g-exp"), key("g-exp-data"));
    let guard = locker.lock(&k).unwrap();
    wait_until("the lock key expired", Duration::from_secs(10), || {
        !exists(&server, &k)
    });
    let mut p = redis::pipe();
    p.set(&data, "late");
    assert!(is_lost(guard.run_if_held(&p)));
    assert!(!exists(&server, &data));
    assert!(guard.is_lost());
}

#[test]
fn a_key_taken_by_another_owner_runs_nothing() {
    let server = Server::start();
    let locker = server.locker();
    let (k, data) = (key("g-taken"), key("g-taken-data"));
    let guard = locker.lock(&k).unwrap();
    let _: () = redis::cmd("DEL").arg(&k).query(&mut server.conn()).unwrap();
    lock_as_someone_else(&server, &k, 60_000);
    let mut p = redis::pipe();
    p.set(&data, "late").incr(key("g-taken-count"), 1);
    assert!(is_lost(guard.run_if_held(&p)));
    assert!(!exists(&server, &data));
    assert!(!exists(&server, &key("g-taken-count")));
    assert!(guard.is_lost());
    // The other owner's key is left alone.
    assert!(get(&server, &k).unwrap().starts_with(common::SOMEONE_ELSE));
}

#[test]
fn an_error_reply_stops_the_commands_after_it() {
    let server = Server::start();
    let locker = server.locker();
    let (k, hash, a, b) = (key("g-err"), key("g-err-h"), key("g-err-a"), key("g-err-b"));
    let _: () = redis::cmd("HSET")
        .arg(&hash)
        .arg("f")
        .arg("1")
        .query(&mut server.conn())
        .unwrap();
    let guard = locker.lock(&k).unwrap();
    let mut p = redis::pipe();
    p.set(&a, "1").incr(&hash, 1).set(&b, "2");
    match guard.run_if_held(&p) {
        Err(Error::Redis(e)) => assert_eq!(e.code(), Some("WRONGTYPE"), "{e}"),
        other => panic!("expected the command's error, got {other:?}"),
    }
    assert_eq!(
        get(&server, &a).as_deref(),
        Some("1"),
        "the command before it ran"
    );
    assert!(!exists(&server, &b), "the command after it did not");
    assert!(!guard.is_lost(), "a command's error is not a loss");
}

#[test]
fn unknown_commands_and_wrong_arity_are_refused_before_anything_runs() {
    let server = Server::start();
    let locker = server.locker();
    let (k, a) = (key("g-arity"), key("g-arity-a"));
    let guard = locker.lock(&k).unwrap();
    let mut unknown = redis::pipe();
    unknown.set(&a, "1").cmd("NOSUCHCOMMAND").arg(&a);
    assert!(matches!(
        guard.run_if_held(&unknown),
        Err(Error::InvalidInput(_))
    ));
    let mut arity = redis::pipe();
    arity.set(&a, "1").cmd("SET").arg(&a);
    match guard.run_if_held(&arity) {
        Err(Error::InvalidInput(msg)) => assert!(msg.contains("command 2"), "{msg}"),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert!(!exists(&server, &a), "nothing may run");
    // The guard's own keys are not the commands' to write.
    let mut own = redis::pipe();
    own.del(&k);
    assert!(matches!(
        guard.run_if_held(&own),
        Err(Error::InvalidInput(_))
    ));
    let mut internal = redis::pipe();
    internal.del(format!("{}fence", reserved(None)));
    assert!(matches!(
        guard.run_if_held(&internal),
        Err(Error::InvalidInput(_))
    ));
    guard.unlock().unwrap();
}

/// Holders whose lease runs out between their two guarded writes (a pause
/// past the TTL, with no watchdog): the second write of a paused holder is
/// refused, so no holder's pair of writes has another's write in between.
#[test]
fn guarded_writes_of_contending_holders_never_interleave() {
    let server = Server::start();
    let (k, log) = (key("g-contend"), key("g-contend-log"));
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let locker = server
                .builder()
                .ttl(Duration::from_millis(200))
                .watchdog(false)
                .build()
                .unwrap();
            let (k, log) = (k.clone(), log.clone());
            std::thread::spawn(move || {
                let mut refused = 0;
                for round in 0..4 {
                    let guard = locker.lock_timeout(&k, Duration::from_secs(30)).unwrap();
                    let id = format!("t{t}r{round}");
                    let mut start = redis::pipe();
                    start.rpush(&log, format!("{id}:start"));
                    if guard.run_if_held(&start).is_err() {
                        refused += 1;
                        continue;
                    }
                    if round % 2 == 1 {
                        // The pause: past the lease, so another may hold it now.
                        std::thread::sleep(Duration::from_millis(350));
                    }
                    let mut end = redis::pipe();
                    end.rpush(&log, format!("{id}:end"));
                    match guard.run_if_held(&end) {
                        Ok(_) => assert!(round % 2 == 0, "{id}: a paused holder's write landed"),
                        Err(Error::Lost { .. }) => refused += 1,
                        Err(e) => panic!("{id}: {e}"),
                    }
                }
                refused
            })
        })
        .collect();
    let refused: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(refused, 6, "every paused holder's second write is refused");
    let entries: Vec<String> = redis::cmd("LRANGE")
        .arg(&log)
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap();
    for (i, e) in entries.iter().enumerate() {
        if let Some(id) = e.strip_suffix(":end") {
            assert_eq!(
                entries[i - 1],
                format!("{id}:start"),
                "interleaved: {entries:?}"
            );
        }
    }
    assert_eq!(entries.len(), 12 + 6, "{entries:?}");
}

#[test]
fn a_permits_and_a_writers_and_a_readers_guarded_writes() {
    let server = Server::start();
    let locker = server.locker();
    let name = key("g-sem");
    let sem = locker.semaphore(&name, 2).unwrap();
    let (a, b) = (sem.acquire().unwrap(), sem.acquire().unwrap());
    let count = key("g-sem-count");
    let mut p = redis::pipe();
    p.incr(&count, 1);
    assert_eq!(a.run_if_held(&p).unwrap(), vec![Value::Int(1)]);
    assert_eq!(b.run_if_held(&p).unwrap(), vec![Value::Int(2)]);
    // Permit a's key gone: a's writes are refused, b's still land.
    let permit_key = format!("{}permit:{}:{name}", reserved(None), a.permit().unwrap());
    let _: () = redis::cmd("DEL")
        .arg(&permit_key)
        .query(&mut server.conn())
        .unwrap();
    assert!(is_lost(a.run_if_held(&p)));
    assert_eq!(b.run_if_held(&p).unwrap(), vec![Value::Int(3)]);
    drop((a, b));

    let rw = locker.rwlock(key("g-rw")).unwrap();
    let writer = rw.write().unwrap();
    assert_eq!(writer.run_if_held(&p).unwrap(), vec![Value::Int(4)]);
    let writer_key = format!("{}rw-write:{}", reserved(None), key("g-rw"));
    let _: () = redis::cmd("DEL")
        .arg(&writer_key)
        .query(&mut server.conn())
        .unwrap();
    assert!(is_lost(writer.run_if_held(&p)));
    drop(writer);

    let reader = rw.read().unwrap();
    assert_eq!(reader.run_if_held(&p).unwrap(), vec![Value::Int(5)]);
    // A read hold no longer counted among the readers keeps no writer out:
    // it is lost, as its renewal would find.
    let readers = format!("{}rw-readers:{}", reserved(None), key("g-rw"));
    let _: () = redis::cmd("DEL")
        .arg(&readers)
        .query(&mut server.conn())
        .unwrap();
    assert!(is_lost(reader.run_if_held(&p)));
    assert_eq!(get(&server, &count).as_deref(), Some("5"));
}

#[test]
fn cluster_commands_must_share_the_lock_keys_slot() {
    let cluster = Cluster::start();
    let locker = Locker::new(cluster.pool());
    let guard = locker.lock(key("{acct7}:lock")).unwrap();
    let mut same = redis::pipe();
    same.set(key("{acct7}:balance"), 10)
        .incr(key("{acct7}:version"), 1);
    assert_eq!(
        guard.run_if_held(&same).unwrap(),
        vec![Value::Okay, Value::Int(1)]
    );
    let mut cross = redis::pipe();
    cross.set(key("{acct7}:a"), 1).set(key("{acct8}:b"), 1);
    match guard.run_if_held(&cross) {
        Err(Error::InvalidInput(msg)) => assert!(msg.contains("hash tag"), "{msg}"),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    let keys = cluster.all_keys();
    assert!(
        !keys
            .iter()
            .any(|k| k.contains("{acct8}") || k.contains("{acct7}:a")),
        "{keys:?}"
    );
    // A permit's keys are in its name's slot: the same rule holds.
    let permit = locker
        .semaphore(key("{acct7}:sem"), 2)
        .unwrap()
        .acquire()
        .unwrap();
    assert_eq!(
        permit.run_if_held(&same).unwrap(),
        vec![Value::Okay, Value::Int(2)]
    );
    assert!(matches!(
        permit.run_if_held(&cross),
        Err(Error::InvalidInput(_))
    ));
}

#[test]
fn redlock_guards_refuse_guarded_writes() {
    let servers = servers(3);
    let locker = redlock_builder(&servers).build().unwrap();
    let guard = locker.lock(key("g-redlock")).unwrap();
    let mut p = redis::pipe();
    p.set(key("g-redlock-data"), 1);
    assert!(matches!(
        guard.run_if_held(&p),
        Err(Error::Unsupported { .. })
    ));
    for s in &servers {
        assert!(!exists(s, &key("g-redlock-data")));
    }
    assert!(!guard.is_lost());
}

/// The commands' keys are declared to the script, so an ACL user's key
/// rules refuse the whole script before any command runs.
#[test]
fn an_acl_users_key_rules_refuse_the_script_before_anything_runs() {
    let server = Server::start();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "app",
            "on",
            ">pw",
            "~app:*",
            "~__redmutex__:*",
            "+@all",
        ])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://app:pw@127.0.0.1:{}/", server.port());
    let locker = Locker::open(&url).unwrap();
    let guard = locker.lock(format!("app:{}", key("g-acl"))).unwrap();
    let (mine, other) = (format!("app:{}", key("g-acl-a")), key("other:g-acl-b"));
    let mut p = redis::pipe();
    p.set(&mine, 1).set(&other, 1);
    match guard.run_if_held(&p) {
        Err(Error::Redis(e)) => assert_eq!(e.code(), Some("NOPERM"), "{e}"),
        other => panic!("expected NOPERM, got {other:?}"),
    }
    assert!(!exists(&server, &mine), "nothing may run");
    let mut ok = redis::pipe();
    ok.set(&mine, 2);
    assert_eq!(guard.run_if_held(&ok).unwrap(), vec![Value::Okay]);
}

/// A multi-key guard's write runs only while every one of its keys is its
/// own.
#[test]
fn a_multi_key_guard_needs_every_key() {
    let server = Server::start();
    let locker = server.locker();
    let (a, b, data) = (key("g-multi-a"), key("g-multi-b"), key("g-multi-data"));
    let guard = locker.lock_all(&[&a, &b]).unwrap();
    let mut p = redis::pipe();
    p.incr(&data, 1);
    assert_eq!(guard.run_if_held(&p).unwrap(), vec![Value::Int(1)]);
    let _: () = redis::cmd("DEL").arg(&b).query(&mut server.conn()).unwrap();
    assert!(is_lost(guard.run_if_held(&p)));
    assert_eq!(get(&server, &data).as_deref(), Some("1"));
    assert!(exists(&server, &a), "the key still ours is left alone");
}
