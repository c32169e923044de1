//! Guarded writes and fences given odd input (a hostile review of issue 33
//! items 1 and 2): commands the server would refuse only once their turn
//! came, commands that touch the lock's keys without naming them, binary
//! keys on a Cluster, fenced commands that touch the fence, huge pipelines.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::time::Duration;

use common::{key, Cluster, Server};
use redis::Value;
use redmutex::{fence, Error, Locker};

fn exists(server: &Server, k: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(k)
        .query::<i64>(&mut server.conn())
        .unwrap()
        == 1
}

/// The docs promise an unknown command or a wrong number of arguments is
/// refused before anything runs: so too for a command of one word, and for
/// a command that names no key.
#[test]
fn keyless_and_one_word_commands_are_checked_before_anything_runs() {
    let server = Server::start();
    let locker = server.locker();
    let (k, a) = (key("o-arity"), key("o-arity-a"));
    let guard = locker.lock(&k).unwrap();
    let cases: Vec<(&str, redis::Cmd)> = vec![
        (
            "an unknown command of one word",
            redis::cmd("NOSUCHCOMMAND"),
        ),
        ("GET with no key", redis::cmd("GET")),
        ("PUBLISH with a channel only", {
            let mut c = redis::cmd("PUBLISH");
            c.arg("some-channel");
            c
        }),
        ("ECHO with two arguments", {
            let mut c = redis::cmd("ECHO");
            c.arg("x").arg("y");
            c
        }),
    ];
    for (what, cmd) in cases {
        let mut p = redis::pipe();
        p.set(&a, "1").add_command(cmd);
        match guard.run_if_held(&p) {
            Err(Error::InvalidInput(msg)) => assert!(msg.contains("command 2"), "{what}: {msg}"),
            other => panic!("{what}: expected InvalidInput, got {other:?}"),
        }
        assert!(!exists(&server, &a), "{what}: nothing may run");
    }
    // Well-formed keyless commands still run.
    let mut fine = redis::pipe();
    fine.set(&a, "1")
        .cmd("PING")
        .cmd("PUBLISH")
        .arg("some-channel")
        .arg("m")
        .cmd("ECHO")
        .arg("x");
    assert_eq!(
        guard.run_if_held(&fine).unwrap(),
        vec![
            Value::Okay,
            Value::SimpleString("PONG".into()),
            Value::Int(0),
            Value::BulkString(b"x".to_vec())
        ]
    );
    assert!(!guard.is_lost());
}

/// FLUSHDB, FLUSHALL and SWAPDB name no key, yet delete (or move away)
/// the lock's key: a guarded write may not touch the lock's own keys, by
/// name or not. Run, they leave the guard believing it holds a lock anyone
/// can take.
#[test]
fn commands_that_touch_every_key_are_refused() {
    let server = Server::start();
    let locker = server.locker();
    let (k, a) = (key("o-flush"), key("o-flush-a"));
    let guard = locker.lock(&k).unwrap();
    let cases: Vec<(&str, redis::Cmd)> = vec![
        ("FLUSHDB", redis::cmd("FLUSHDB")),
        ("FLUSHALL", redis::cmd("flushall")),
        ("FLUSHDB ASYNC", {
            let mut c = redis::cmd("FLUSHDB");
            c.arg("ASYNC");
            c
        }),
        ("SWAPDB", {
            let mut c = redis::cmd("SWAPDB");
            c.arg(0).arg(1);
            c
        }),
    ];
    for (what, cmd) in cases {
        let mut p = redis::pipe();
        p.set(&a, "1").add_command(cmd);
        assert!(
            matches!(guard.run_if_held(&p), Err(Error::InvalidInput(_))),
            "{what}"
        );
        assert!(exists(&server, &k), "{what}: the lock's key is still there");
        assert!(!exists(&server, &a), "{what}: nothing may run");
    }
    guard.unlock().unwrap();
}

/// A fenced run may not touch its own fence: deleting or lowering it would
/// let a stale token in again.
#[test]
fn fenced_commands_may_not_touch_the_fence_key() {
    let server = Server::start();
    let mut conn = server.conn();
    let r = key("o-fence");
    assert!(fence::admit(&mut conn, &r, 10).unwrap());
    let mut del = redis::pipe();
    del.del(&r);
    let mut lower = redis::pipe();
    lower.set(&r, 1);
    for (what, p) in [("DEL", del), ("SET", lower)] {
        assert!(
            matches!(
                fence::admit_and_run(&mut conn, &r, 10, &p),
                Err(Error::InvalidInput(_))
            ),
            "{what}"
        );
        assert!(
            !fence::admit(&mut conn, &r, 5).unwrap(),
            "{what}: a stale token stays stale"
        );
    }
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    Duration::from(t)
}

/// A pipeline of many commands, one of them marked `ignore()`: the reply
/// is read in time linear in the commands, not quadratic.
#[test]
fn a_huge_pipeline_with_an_ignored_command_is_read_in_linear_time() {
    let server = Server::start();
    // A server slowed by a loaded machine may take longer than the default
    // I/O timeout to run the script: not what is measured here.
    let locker = server
        .builder()
        .io_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let (k, count) = (key("o-huge"), key("o-huge-count"));
    let guard = locker.lock(&k).unwrap();
    let n = 150_000;
    let mut p = redis::pipe();
    p.incr(&count, 1).ignore();
    for _ in 1..n {
        p.incr(&count, 1);
    }
    // The read runs on this thread: its CPU time, which a loaded machine
    // does not stretch as it stretches the wall clock.
    let start = thread_cpu();
    let replies = guard.run_if_held(&p).unwrap();
    let took = thread_cpu().saturating_sub(start);
    assert_eq!(replies.len(), n - 1);
    assert_eq!(replies.last(), Some(&Value::Int(i64::try_from(n).unwrap())));
    // Building, sending and reading the replies of 150,000 INCRs takes
    // well under a second of CPU here; the quadratic read took tens of
    // seconds.
    assert!(took < Duration::from_secs(8), "took {took:?} of CPU");
}

/// CRC16/XMODEM modulo 16384, the server's slot of a key with no hash tag.
fn slot_of(bytes: &[u8]) -> u16 {
    let crc = bytes.iter().fold(0u16, |crc, &b| {
        (0..8).fold(crc ^ (u16::from(b) << 8), |c, _| {
            if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            }
        })
    });
    crc % 16384
}

/// A key that is not UTF-8 has its slot computed on its bytes, as the
/// server does: one in another slot is refused with the hash-tag rule
/// (not the server's CROSSSLOT), one in the lock's slot runs.
#[test]
fn cluster_binary_keys_are_slotted_by_their_bytes() {
    let cluster = Cluster::start();
    let locker = Locker::new(cluster.pool());
    let tag = key("acct9");
    let guard = locker.lock(format!("{{{tag}}}:lock")).unwrap();
    let target = slot_of(tag.as_bytes());
    // 0xff is not UTF-8: a lossy reading of it is U+FFFD, three bytes.
    let mut sneaky = None;
    let mut fitting = None;
    for n in 0u32.. {
        let suffix = n.to_string();
        let raw = [&[0xffu8][..], suffix.as_bytes()].concat();
        let lossy = format!("\u{fffd}{suffix}");
        if sneaky.is_none() && slot_of(lossy.as_bytes()) == target && slot_of(&raw) != target {
            sneaky = Some(raw.clone());
        }
        if fitting.is_none() && slot_of(&raw) == target {
            fitting = Some(raw);
        }
        if sneaky.is_some() && fitting.is_some() {
            break;
        }
    }
    let (sneaky, fitting) = (sneaky.unwrap(), fitting.unwrap());
    let mut cross = redis::pipe();
    cross.set(&sneaky[..], 1);
    match guard.run_if_held(&cross) {
        Err(Error::InvalidInput(msg)) => assert!(msg.contains("hash tag"), "{msg}"),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    let mut same = redis::pipe();
    same.set(&fitting[..], 1).get(&fitting[..]);
    assert_eq!(
        guard.run_if_held(&same).unwrap(),
        vec![Value::Okay, Value::BulkString(b"1".to_vec())]
    );
}

/// An ACL user allowed `COMMAND GETKEYS` but not `COMMAND INFO` (as the
/// docs first asked only the former) still writes guarded: the arity
/// check of keyless commands is skipped for it, the server refuses those
/// when their turn comes.
#[test]
fn an_acl_user_without_command_info_still_writes_guarded() {
    let server = Server::start();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "app",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-command",
            "+command|getkeys",
        ])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://app:pw@127.0.0.1:{}/", server.port());
    let locker = Locker::open(&url).unwrap();
    let (k, a) = (key("o-acl"), key("o-acl-a"));
    let guard = locker.lock(&k).unwrap();
    let mut p = redis::pipe();
    p.set(&a, "1").cmd("PING").get(&a);
    assert_eq!(
        guard.run_if_held(&p).unwrap(),
        vec![
            Value::Okay,
            Value::SimpleString("PONG".into()),
            Value::BulkString(b"1".to_vec())
        ]
    );
    guard.unlock().unwrap();
}

/// A Cluster connection of redis-rs sends a request again when its reply
/// does not come within the read timeout (up to 16 times by default): a
/// guarded write whose script outlasts the locker's I/O timeout must still
/// run once, at most, as a plain connection's would.
#[test]
fn a_slow_guarded_write_on_a_cluster_runs_once() {
    let cluster = Cluster::start();
    let pool = cluster.pool();
    let locker = Locker::builder(pool.clone())
        .io_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let tag = key("slow");
    let big = format!("{{{tag}}}:big");
    let mut c = pool.get_timeout(Duration::from_secs(10)).unwrap();
    for chunk in 0..30u64 {
        let mut push = redis::cmd("RPUSH");
        push.arg(&big);
        for i in 0..10_000u64 {
            push.arg((chunk * 10_000 + i) * 7919 % 1_000_003);
        }
        let _: () = push.query(&mut *c).unwrap();
    }
    let guard = locker.lock(format!("{{{tag}}}:lock")).unwrap();
    let count = format!("{{{tag}}}:count");
    let mut p = redis::pipe();
    // Sorting 300,000 strings four times outlasts 50 ms by far.
    for _ in 0..4 {
        p.cmd("SORT")
            .arg(&big)
            .arg("ALPHA")
            .arg("STORE")
            .arg(format!("{{{tag}}}:sorted"))
            .ignore();
    }
    p.incr(&count, 1);
    match guard.run_if_held(&p) {
        Ok(replies) => assert_eq!(replies, vec![Value::Int(1)]),
        Err(Error::Redis(e)) => assert!(e.is_timeout(), "{e}"),
        Err(e) => panic!("{e}"),
    }
    // The resent requests were all written before the call returned; the
    // server runs them one after the other once the first script is done.
    let total: Option<i64> = redis::cmd("GET").arg(&count).query(&mut *c).unwrap();
    assert_eq!(total, Some(1), "the guarded write ran more than once");
}

/// As `a_slow_guarded_write_on_a_cluster_runs_once`, for a fenced run on a
/// Cluster connection of the caller's own whose read timeout is short.
#[test]
fn a_slow_fenced_run_on_a_cluster_runs_once() {
    let cluster = Cluster::start();
    let client = redis::cluster::ClusterClient::builder(cluster.urls())
        .response_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let mut c = client.get_connection().unwrap();
    let tag = key("slowfence");
    let big = format!("{{{tag}}}:big");
    for chunk in 0..30u64 {
        let mut push = redis::cmd("RPUSH");
        push.arg(&big);
        for i in 0..10_000u64 {
            push.arg((chunk * 10_000 + i) * 7919 % 1_000_003);
        }
        let _: () = push.query(&mut c).unwrap();
    }
    let count = format!("{{{tag}}}:count");
    let mut p = redis::pipe();
    for _ in 0..4 {
        p.cmd("SORT")
            .arg(&big)
            .arg("ALPHA")
            .arg("STORE")
            .arg(format!("{{{tag}}}:sorted"))
            .ignore();
    }
    p.incr(&count, 1);
    match fence::admit_and_run(&mut c, &format!("{{{tag}}}:fence"), 7, &p) {
        Ok(replies) => assert_eq!(replies, vec![Value::Int(1)]),
        Err(Error::Redis(e)) => assert!(e.is_timeout(), "{e}"),
        Err(e) => panic!("{e}"),
    }
    let mut after = client.get_connection().unwrap();
    let total: Option<i64> = redis::cmd("GET").arg(&count).query(&mut after).unwrap();
    assert_eq!(total, Some(1), "the fenced run ran more than once");
}
