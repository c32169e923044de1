//! Fencing helpers (`redmutex::fence`): a resource on its own Redis admits
//! a token at least as high as the highest it has seen, and refuses a
//! stale one.
#![allow(clippy::unwrap_used, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use common::{key, Server};
use redis::Value;
use redmutex::{fence, Error};

fn get(server: &Server, k: &str) -> Option<String> {
    redis::cmd("GET").arg(k).query(&mut server.conn()).unwrap()
}

#[test]
fn admit_takes_tokens_at_least_the_highest_seen() {
    let server = Server::start();
    let mut conn = server.conn();
    let r = key("f-resource");
    assert!(fence::admit(&mut conn, &r, 10).unwrap(), "the first token");
    assert!(
        fence::admit(&mut conn, &r, 10).unwrap(),
        "the same holder again"
    );
    assert!(fence::admit(&mut conn, &r, 12).unwrap(), "a newer holder");
    assert!(!fence::admit(&mut conn, &r, 11).unwrap(), "a stale holder");
    assert!(!fence::admit(&mut conn, &r, 10).unwrap(), "a stale holder");
    assert_eq!(
        get(&server, &r).as_deref(),
        Some("12"),
        "the highest is recorded"
    );
    // Tokens past 2^53 compare exactly (Lua's numbers would not).
    let big = (1u64 << 60) + 1;
    assert!(fence::admit(&mut conn, &r, big).unwrap());
    assert!(!fence::admit(&mut conn, &r, big - 1).unwrap());
    assert!(fence::admit(&mut conn, &r, u64::MAX).unwrap());
    assert_eq!(get(&server, &r), Some(u64::MAX.to_string()));
}

#[test]
fn admit_refuses_a_key_that_holds_no_token() {
    let server = Server::start();
    let mut conn = server.conn();
    let (text, hash) = (key("f-text"), key("f-hash"));
    let _: () = redis::cmd("SET")
        .arg(&text)
        .arg("hello")
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&hash)
        .arg("f")
        .arg(1)
        .query(&mut conn)
        .unwrap();
    assert!(matches!(
        fence::admit(&mut conn, &text, 1),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        fence::admit(&mut conn, &hash, 1),
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(get(&server, &text).as_deref(), Some("hello"));
}

#[test]
fn admit_and_run_runs_only_when_admitted() {
    let server = Server::start();
    let mut conn = server.conn();
    let (r, data) = (key("f-run"), key("f-run-data"));
    let mut p = redis::pipe();
    p.set(&data, "from 20").get(&data);
    assert_eq!(
        fence::admit_and_run(&mut conn, &r, 20, &p).unwrap(),
        vec![Value::Okay, Value::BulkString(b"from 20".to_vec())]
    );
    let mut ignored = redis::pipe();
    ignored.set(&data, "from 20").ignore().get(&data);
    assert_eq!(
        fence::admit_and_run(&mut conn, &r, 20, &ignored).unwrap(),
        vec![Value::BulkString(b"from 20".to_vec())]
    );
    let mut stale = redis::pipe();
    stale.set(&data, "from 19");
    match fence::admit_and_run(&mut conn, &r, 19, &stale) {
        Err(Error::Lost { key }) => assert_eq!(key, r),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(
        get(&server, &data).as_deref(),
        Some("from 20"),
        "nothing ran"
    );
    assert_eq!(get(&server, &r).as_deref(), Some("20"));
}

/// The tokens of real guards: a holder that lost its lock to a newer one
/// is refused by the resource, while the newer one is admitted.
#[test]
fn a_lost_holders_token_is_refused_after_the_next_holders() {
    let server = Server::start();
    let resource = Server::start(); // the resource's own Redis
    let locker = server.locker();
    let k = key("f-guards");
    let old = locker.lock(&k).unwrap();
    let _: () = redis::cmd("DEL").arg(&k).query(&mut server.conn()).unwrap();
    // The next holder: another thread (this one holds `old`, not known lost).
    let new = common::elsewhere(|| locker.lock(&k).unwrap());
    let mut conn = resource.conn();
    let r = key("f-guards-resource");
    assert!(fence::admit(&mut conn, &r, new.fencing_token()).unwrap());
    assert!(!fence::admit(&mut conn, &r, old.fencing_token()).unwrap());
}
