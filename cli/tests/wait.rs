//! A run that waits for the lock rides out transient errors within its
//! wait, and one that gives up says why.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use redis::Commands;

/// Redis restarts while a run waits (`-w`): the wait goes on, and the run
/// gets the lock once Redis is back (the restarted server has no keys).
#[test]
fn a_wait_survives_a_redis_restart() {
    let mut s = setup("restart");
    // Someone else's lock, for a minute: only the restart frees it.
    let _: () = s
        .conn()
        .set_options(
            "wkey",
            "someone:1:else",
            redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(60_000)),
        )
        .unwrap();
    let waiter = s
        .cmd(&[
            "run",
            "-w",
            "30s",
            "wkey",
            "--",
            "sh",
            "-c",
            "echo ran > \"$OUT\"",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let queue = "__redmutex__:queue:wkey";
    wait_for("the run queued", || {
        s.conn().zcard::<_, u64>(queue).unwrap() == 1
    });
    s.server.restart(Duration::from_secs(20)).unwrap();
    let out = finish(waiter);
    assert_eq!(code(&out), 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(s.file("out")).unwrap().trim(),
        "ran"
    );
}

/// A wait that runs out says how long it waited and who holds the lock.
#[test]
fn a_wait_that_runs_out_says_how_long_and_who_holds_the_lock() {
    let s = setup("ran-out");
    let first = s.start(&["run", "okey", "--", "sh", "-c", RUNS]);
    let out = s.run(&["run", "-w", "300ms", "okey", "--", "true"]);
    assert_eq!(code(&out), 75, "{out:?}");
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.contains("waited 3"), "{said}");
    assert!(said.contains(&format!(":{}\"", first.id())), "{said}");
    assert!(said.contains("fencing token"), "{said}");
    nix_term(&first);
    let _ = finish(first);
}
