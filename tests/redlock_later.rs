//! Redlock's releases sent again to a master that missed them (issue 42
//! items 1 and 2): for as long as the key left there can live (an
//! `extend`ed guard's key lives longer than the configured TTL), and to a
//! master that refused the release for a moment (`BUSY`, a script running
//! past the busy threshold; `LOADING`; `NOREPLICAS`, its replicas lagging;
//! `READONLY`, demoted by a failover) as to one that did not answer.
#![allow(
    clippy::disallowed_methods, // tests spawn threads and hold a fault for a while
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::time::Duration;

use common::{holders_of, key, redlock_builder, servers, wait_until, Server};

/// How long the key of a missed release may stay on the master once it
/// answers again: the re-sent release comes after at most a second's pause
/// (see `raw/later.rs`); 20 s is generous on a loaded machine, and far
/// below the minute the keys of these tests live.
const FREED_WITHIN: Duration = Duration::from_secs(20);

/// A guard extended to a minute (the locker's TTL is 3 s) is unlocked
/// while one master hangs for twice the configured TTL: the release sent
/// again must still reach that master once it answers, since the key there
/// lives a minute, not the configured TTL.
#[test]
fn an_extended_guards_release_is_sent_again_for_as_long_as_its_key_lives() {
    let servers = servers(3);
    let ttl = Duration::from_secs(3);
    let io = Duration::from_millis(300);
    let locker = redlock_builder(&servers)
        .ttl(ttl)
        .io_timeout(io)
        .checkout_timeout(io)
        .watchdog(false)
        .build()
        .unwrap();
    let k = key("rl-later-extended");
    let g = locker.lock(&k).unwrap();
    g.extend(Duration::from_secs(60)).unwrap();
    servers[0].pause();
    g.unlock().unwrap();
    // The fault itself: the master stays hung past the configured TTL (no
    // event to wait for; its length is the point of the test).
    std::thread::sleep(ttl * 2);
    servers[0].resume();
    wait_until(
        "the release sent again to the master that hung",
        FREED_WITHIN,
        || holders_of(&servers[..1], &k) == 0,
    );
    let g = locker
        .lock_timeout(&k, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("the lock was still blocked: {e}"));
    assert_eq!(holders_of(&servers, &k), 3);
    g.unlock().unwrap();
}

/// A guard unlocked while `refuse` has master 0
/// refuse every command (it returns what ends that): the release it
/// refused must be sent again once it answers, as to a master that did not
/// answer at all.
fn a_refused_release_is_sent_again(name: &str, refuse: impl FnOnce(&Server) -> Spell<'_>) {
    let servers = servers(3);
    let locker = redlock_builder(&servers)
        .ttl(Duration::from_secs(60))
        .watchdog(false)
        .build()
        .unwrap();
    let k = key(name);
    let g = locker.lock(&k).unwrap();
    let end = refuse(&servers[0]);
    // Answered (refused) at once: the release's majority holds.
    g.unlock().unwrap();
    assert_eq!(holders_of(&servers[1..], &k), 0);
    end();
    wait_until(
        "the release sent again to the master that refused it",
        FREED_WITHIN,
        || holders_of(&servers[..1], &k) == 0,
    );
    locker
        .lock_timeout(&k, Duration::from_secs(10))
        .unwrap()
        .unlock()
        .unwrap();
}

/// What ends a spell of refusals, once they have begun.
type Spell<'a> = Box<dyn FnOnce() + 'a>;

/// A master busy with a long script answers `BUSY` to everything but
/// `SCRIPT KILL` (past `busy-reply-threshold`, formerly `lua-time-limit`).
#[test]
fn a_release_refused_busy_is_sent_again() {
    a_refused_release_is_sent_again("rl-later-busy", busy_spell);
}

/// A master restarting reads its data and answers `LOADING` meanwhile (a
/// `DEBUG RELOAD` slowed by `key-load-delay` here).
#[test]
fn a_release_refused_loading_is_sent_again() {
    a_refused_release_is_sent_again("rl-later-loading", loading_spell);
}

/// A master whose replicas lag refuses writes (`NOREPLICAS`, with
/// `min-replicas-to-write`): its scripts run nothing until they catch up,
/// a refusal for a moment as `BUSY` is. (Here no replica at all, until the
/// setting is taken back.)
#[test]
fn a_release_refused_noreplicas_is_sent_again() {
    a_refused_release_is_sent_again("rl-later-noreplicas", noreplicas_spell);
}

/// A master demoted by a failover (a Sentinel instance's, before its pool
/// learns of the new master) refuses writes with `READONLY`, and ran
/// nothing; the next call reaches a master again. (Here the master is made
/// a replica of an address where nobody listens, so it keeps its data,
/// until `REPLICAOF NO ONE`.)
#[test]
fn a_release_refused_readonly_is_sent_again() {
    a_refused_release_is_sent_again("rl-later-readonly", readonly_spell);
}

/// `min-replicas-to-write 1` on a master without replicas: `NOREPLICAS`
/// to every write until the setting is taken back.
fn noreplicas_spell(server: &Server) -> Spell<'_> {
    server.config_set("min-replicas-to-write", "1");
    refused_with(server, "NOREPLICAS", &["SET", "rl-later-probe", "1"]);
    Box::new(move || server.config_set("min-replicas-to-write", "0"))
}

/// The master made a replica of a port nobody listens on: `READONLY` to
/// every write (its data kept, as no sync can start) until `REPLICAOF NO
/// ONE`.
fn readonly_spell(server: &Server) -> Spell<'_> {
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = nobody.local_addr().unwrap().port().to_string();
    drop(nobody);
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(&port)
        .query(&mut server.conn())
        .unwrap();
    refused_with(server, "READONLY", &["SET", "rl-later-probe", "1"]);
    Box::new(move || {
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut server.conn())
            .unwrap();
    })
}

/// Starts a script that loops until killed on `server`, once the server
/// answers `BUSY` to others; the spell ends with `SCRIPT KILL`.
fn busy_spell(server: &Server) -> Spell<'_> {
    server.config_set("lua-time-limit", "50");
    let mut conn = server.conn();
    conn.set_read_timeout(None).unwrap();
    let looping = std::thread::spawn(move || {
        // Ends with an error once killed.
        let _ = redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query::<redis::Value>(&mut conn);
    });
    refused_with(server, "BUSY", &["PING"]);
    Box::new(move || {
        let _: () = redis::cmd("SCRIPT")
            .arg("KILL")
            .query(&mut server.conn())
            .unwrap();
        looping.join().unwrap();
    })
}

/// Starts a `DEBUG RELOAD` of `server` that takes seconds (2,000 keys
/// loaded a millisecond each, the server answering others `LOADING`
/// meanwhile), once it answers `LOADING`; the spell ends with the reload.
/// A loading server answers between keys every
/// `loading-process-events-interval-bytes` (1 KB here); Redis 6.2 has no
/// such setting and answers every 2 MB loaded, which the keys' 4 KB values
/// (saved uncompressed) make about every 500 keys (half a second).
fn loading_spell(server: &Server) -> Spell<'_> {
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(2000)
        .arg("rl-later-filler")
        .arg(4096)
        .query(&mut server.conn())
        .unwrap();
    server.config_set("rdbcompression", "no");
    server.config_set("key-load-delay", "1000");
    let _ = redis::cmd("CONFIG")
        .arg("SET")
        .arg("loading-process-events-interval-bytes")
        .arg("1024")
        .query::<()>(&mut server.conn());
    let mut conn = server.conn();
    conn.set_read_timeout(None).unwrap();
    let reloading = std::thread::spawn(move || {
        let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut conn).unwrap();
    });
    refused_with(server, "LOADING", &["GET", "rl-later-probe"]);
    Box::new(move || reloading.join().unwrap())
}

/// Waits until `server` answers `probe` from others with the error `code`
/// (a command it refuses so: Redis 6.2 answers `PING` while loading).
fn refused_with(server: &Server, code: &str, probe: &[&str]) {
    let mut conn = server.conn();
    let mut cmd = redis::cmd(probe[0]);
    cmd.arg(&probe[1..]);
    wait_until(
        &format!("the server answers {code}"),
        Duration::from_secs(20),
        || matches!(cmd.query::<redis::Value>(&mut conn), Err(e) if e.code() == Some(code)),
    );
}
