//! The `redmutex` command against a real `redis-server` and real child
//! processes (`sh`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests spawn threads and sleep briefly to poll

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use redis::Commands;

#[test]
fn one_run_at_a_time_and_busy_is_75() {
    let s = setup("busy");
    let first = s.start(&["run", "job", "--", "sh", "-c", RUNS]);
    let second = s.run(&["run", "-n", "job", "--", "sh", "-c", "echo ran > \"$OUT\""]);
    assert_eq!(code(&second), 75, "{second:?}");
    assert!(!s.file("out").exists(), "the second child never ran");
    let waited = s.run(&["run", "-w", "300ms", "-E", "3", "job", "--", "true"]);
    assert_eq!(code(&waited), 3, "{waited:?}");
    nix_term(&first);
    let first = finish(first);
    assert_eq!(
        code(&first),
        143,
        "the child's own end passed through: {first:?}"
    );
}

#[test]
fn exit_codes_and_signals_pass_through() {
    let s = setup("codes");
    assert_eq!(code(&s.run(&["run", "k", "--", "sh", "-c", "exit 3"])), 3);
    assert_eq!(code(&s.run(&["run", "k", "--", "true"])), 0);
    assert_eq!(
        code(&s.run(&["run", "k", "--", "sh", "-c", "kill -9 $$"])),
        137
    );
    assert_eq!(code(&s.run(&["run", "k", "--", "/no/such/program"])), 127);
    assert_eq!(code(&s.run(&["run", "k"])), 64, "no command");
    assert_eq!(code(&s.run(&["run", "--ttl", "x", "k", "--", "true"])), 64);
    assert_eq!(code(&s.run(&["nonsense"])), 64);
    let free: i64 = s.conn().exists("k").unwrap();
    assert_eq!(free, 0, "released after every run");
}

#[test]
fn the_child_gets_the_key_and_a_rising_fencing_token_but_no_owner_token() {
    let s = setup("env");
    let print = "echo \"$REDMUTEX_KEY $REDMUTEX_FENCING_TOKEN\"; env > \"$OUT\"; \
                 while [ ! -e \"$READY\" ]; do sleep 0.02; done";
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let _ = std::fs::remove_file(s.file("ready"));
        let run = s
            .cmd(&["run", "envkey", "--", "sh", "-c", print])
            .spawn()
            .unwrap();
        wait_for("the child's environment", || s.file("out").exists());
        let value: String = s.conn().get("envkey").unwrap();
        let owner = value.split(':').next().unwrap().to_owned();
        std::fs::write(s.file("ready"), "go").unwrap();
        let out = finish(run);
        assert_eq!(code(&out), 0, "{out:?}");
        let env = std::fs::read_to_string(s.file("out")).unwrap();
        assert!(!env.contains(&owner), "the owner token reached the child");
        let line = String::from_utf8(out.stdout).unwrap();
        let mut parts = line.split_whitespace();
        assert_eq!(parts.next(), Some("envkey"));
        tokens.push(parts.next().unwrap().parse::<u64>().unwrap());
        std::fs::remove_file(s.file("out")).unwrap();
    }
    assert!(tokens[1] > tokens[0], "{tokens:?}");
}

#[test]
fn a_deleted_key_stops_the_child_with_term_and_exits_70() {
    let s = setup("lost");
    let child = "trap 'echo term > \"$OUT\"; exit 0' TERM; ".to_owned() + RUNS;
    let run = s.start(&[
        "run",
        "-v",
        "--ttl",
        "1s",
        "--kill-grace",
        "400ms",
        "lostkey",
        "--",
        "sh",
        "-c",
        &child,
    ]);
    let _: () = s.conn().del("lostkey").unwrap();
    let out = finish(run);
    assert_eq!(code(&out), 70, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(s.file("out")).unwrap().trim(),
        "term"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("redmutex::lease"),
        "-v shows the loss: {stderr}"
    );
}

#[test]
fn a_child_that_ignores_term_and_its_grandchildren_are_killed_after_the_grace() {
    let s = setup("kill");
    let child = "sleep 1000 & echo $! > \"$OUT\"; trap '' TERM; ".to_owned() + RUNS;
    let started = Instant::now();
    let run = s.start(&[
        "run",
        "--ttl",
        "1s",
        "--kill-grace",
        "300ms",
        "killkey",
        "--",
        "sh",
        "-c",
        &child,
    ]);
    let grandchild = std::fs::read_to_string(s.file("out")).unwrap();
    let proc = PathBuf::from(format!("/proc/{}", grandchild.trim()));
    assert!(proc.exists());
    let _: () = s.conn().set("killkey", "someone else").unwrap();
    let out = finish(run);
    assert_eq!(code(&out), 70, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    wait_for("the grandchild gone", || {
        std::fs::read_to_string(proc.join("stat")).map_or(true, |stat| stat.contains(") Z "))
    });
    let value: String = s.conn().get("killkey").unwrap();
    assert_eq!(value, "someone else", "the other owner's key is left alone");
}

#[test]
fn a_signal_while_waiting_ends_the_wait_and_leaves_nothing() {
    let s = setup("waiting");
    let holder = s.start(&["run", "wkey", "--", "sh", "-c", RUNS]);
    let waiter = s
        .cmd(&["run", "wkey", "--", "sh", "-c", "echo ran > \"$OUT\""])
        .spawn()
        .unwrap();
    let queue = "__redmutex__:queue:wkey";
    wait_for("the waiter queued", || {
        s.conn().zcard::<_, u64>(queue).unwrap() == 1
    });
    nix_term(&waiter);
    let out = finish(waiter);
    assert_eq!(code(&out), 143, "{out:?}");
    assert_eq!(
        s.conn().zcard::<_, u64>(queue).unwrap(),
        0,
        "it left the queue"
    );
    assert!(!s.file("out").exists());
    nix_term(&holder);
    let _ = finish(holder);
}

#[test]
fn min_hold_keeps_the_lock_and_max_hold_stops_the_child() {
    let s = setup("holds");
    let out = s.run(&["run", "--min-hold", "3s", "mkey", "--", "true"]);
    assert_eq!(code(&out), 0, "{out:?}");
    let pttl: i64 = s.conn().pttl("mkey").unwrap();
    assert!(pttl > 0 && pttl <= 3000, "{pttl}");
    assert_eq!(code(&s.run(&["run", "-n", "mkey", "--", "true"])), 75);

    let started = Instant::now();
    let out = s.run(&[
        "run",
        "--ttl",
        "2s",
        "--kill-grace",
        "300ms",
        "--max-hold",
        "500ms",
        "xkey",
        "--",
        "sh",
        "-c",
        RUNS,
    ]);
    assert_eq!(code(&out), 70, "{out:?}");
    assert!(started.elapsed() >= Duration::from_millis(500));
}

#[test]
fn an_unreachable_redis_is_69_and_holder_reports() {
    let s = setup("holder");
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("redis://127.0.0.1:{dead}/");
    let started = Instant::now();
    let out = s.run(&["run", "--url", &url, "k", "--", "true"]);
    assert_eq!(code(&out), 69, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(30));

    let out = s.run(&["holder", "hkey"]);
    assert_eq!(
        (code(&out), String::from_utf8(out.stdout).unwrap().trim()),
        (1, "free")
    );
    let run = s.start(&["run", "hkey", "--", "sh", "-c", RUNS]);
    let out = s.run(&["holder", "hkey"]);
    assert_eq!(code(&out), 0, "{out:?}");
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("fencing token"));
    nix_term(&run);
    let _ = finish(run);
}

#[test]
fn lock_delay_keeps_an_expired_lock_from_the_next_run() {
    let s = setup("delay");
    // A clean end releases at once, lock-delay or not.
    let out = s.run(&["run", "--lock-delay", "1h", "dkey", "--", "true"]);
    assert_eq!(code(&out), 0, "{out:?}");
    assert_eq!(code(&s.run(&["run", "-n", "dkey", "--", "true"])), 0);
    // --min-hold lets the lock expire: the delay follows its end.
    let out = s.run(&[
        "run",
        "--lock-delay",
        "1h",
        "--min-hold",
        "300ms",
        "dkey",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 0, "{out:?}");
    let started = Instant::now();
    while s.conn().exists::<_, bool>("dkey").unwrap() {
        assert!(started.elapsed() < Duration::from_secs(10), "never expired");
        std::thread::sleep(Duration::from_millis(20));
    }
    let busy = s.run(&["run", "-n", "dkey", "--", "true"]);
    assert_eq!(code(&busy), 75, "granted inside the delay: {busy:?}");
    assert_eq!(
        code(&s.run(&["run", "--lock-delay", "soon", "k", "--", "true"])),
        64
    );
}
