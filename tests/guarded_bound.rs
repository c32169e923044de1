//! Guarded writes and fenced runs on a hung server keep their documented
//! bound whatever the number of commands (issue 42 item 3): the question
//! of the commands' keys is one exchange, waited for once, not one I/O
//! timeout per command.
#![allow(clippy::unwrap_used, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::time::Duration;

use common::{key, timed, Server};
use redmutex::fence;

/// Commands per call: one I/O timeout per command would take 15 s.
const COMMANDS: usize = 50;
const IO: Duration = Duration::from_millis(300);
/// Added to each documented bound for a loaded machine: far below what
/// one timeout per command costs (`COMMANDS` x `IO`).
const SLACK: Duration = Duration::from_secs(5);

fn writes(prefix: &str) -> redis::Pipeline {
    let mut p = redis::pipe();
    for i in 0..COMMANDS {
        p.set(format!("{prefix}:{i}"), i);
    }
    p
}

/// `Guard::run_if_held` blocks at most a checkout and two I/O timeouts.
#[test]
fn a_guarded_write_on_a_hung_server_keeps_its_bound() {
    let server = Server::start();
    let locker = server.locker_with_io(IO);
    let k = key("bound-guarded");
    let guard = locker.lock(&k).unwrap();
    // The scripts are loaded and a connection is pooled: only the hang is
    // waited for below.
    guard.run_if_held(&writes(&k)).unwrap();
    server.pause();
    let (result, took) = timed(|| guard.run_if_held(&writes(&k)));
    server.resume();
    assert!(result.is_err(), "a hung server answered");
    let bound = IO + IO * 2 + SLACK;
    assert!(
        took < bound,
        "run_if_held of {COMMANDS} commands took {took:?} on a hung server (bound {bound:?})"
    );
    drop(guard);
}

/// `fence::admit_and_run` blocks at most two of the connection's read
/// timeouts (its two round trips).
#[test]
fn a_fenced_run_on_a_hung_server_keeps_its_bound() {
    let server = Server::start();
    let mut conn = server.conn();
    conn.set_read_timeout(Some(IO)).unwrap();
    conn.set_write_timeout(Some(IO)).unwrap();
    let k = key("bound-fence");
    let fence_key = format!("{k}:fence");
    fence::admit_and_run(&mut conn, &fence_key, 1, &writes(&k)).unwrap();
    server.pause();
    let (result, took) = timed(|| fence::admit_and_run(&mut conn, &fence_key, 1, &writes(&k)));
    server.resume();
    assert!(result.is_err(), "a hung server answered");
    let bound = IO * 2 + SLACK;
    assert!(
        took < bound,
        "admit_and_run of {COMMANDS} commands took {took:?} on a hung server (bound {bound:?})"
    );
}
