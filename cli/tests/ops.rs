//! `redmutex list`, `break` and `audit` as an operator uses them, against
//! real `redmutex run` processes: a broken run stops its job and exits 70.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests poll with short sleeps

mod common;

use common::*;
use std::process::Command;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn list_shows_each_run_and_its_waiters() {
    let s = setup("list");
    let first = s.start(&["run", "--prefix", "ops", "nightly", "--", "sh", "-c", RUNS]);
    let waiter = s
        .cmd(&["run", "--prefix", "ops", "nightly", "--", "true"])
        .spawn()
        .unwrap();
    wait_for("the waiter queued", || {
        stdout(&s.run(&["list", "--prefix", "ops", "--json"])).contains(r#""waiters":[""#)
    });
    let table = s.run(&["list", "--prefix", "ops"]);
    assert_eq!(code(&table), 0, "{table:?}");
    let text = stdout(&table);
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    for column in [
        "PREFIX", "KEY", "KIND", "HOLDER", "MS_LEFT", "TOKEN", "WAITERS",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("ops") && row.contains(" nightly ") && row.contains(" lock "),
        "{row}"
    );
    assert!(
        row.contains(&format!(":{}", first.id())),
        "the holder: {row}"
    );
    assert!(row.trim_end().ends_with(" 1"), "one waiter: {row}");
    assert_eq!(lines.next(), None, "{text}");

    let json = stdout(&s.run(&["list", "--prefix", "ops", "--json"]));
    assert!(
        json.starts_with(r#"[{"prefix":"ops","key":"nightly","kind":"lock","holder":""#),
        "{json}"
    );
    // Another pattern, another prefix: nothing listed.
    for args in [
        &["list", "--prefix", "ops", "--json", "day*"][..],
        &["list", "--prefix", "other", "--json"],
    ] {
        let out = s.run(args);
        assert_eq!((code(&out), stdout(&out).trim()), (0, "[]"), "{args:?}");
    }
    nix_term(&first);
    let _ = finish(first);
    let _ = finish(waiter);
}

#[test]
fn a_broken_run_stops_its_job_and_exits_70_and_the_break_is_audited() {
    let s = setup("break");
    let run = s.start(&[
        "run", "--prefix", "ops", "--ttl", "900ms", "job", "--", "sh", "-c", RUNS,
    ]);
    let refused = s.run(&["break", "--prefix", "ops", "job"]);
    assert_eq!(code(&refused), 64, "no --reason: {refused:?}");

    let broke = s.run(&[
        "break",
        "--prefix",
        "ops",
        "job",
        "--reason",
        "stuck at 3 a.m.",
    ]);
    assert_eq!(code(&broke), 0, "{broke:?}");
    let said = stdout(&broke);
    assert!(
        said.contains("job") && said.contains(&format!(":{}", run.id())),
        "says what it broke: {said}"
    );
    let out = finish(run);
    assert_eq!(code(&out), 70, "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken by an operator: stuck at 3 a.m."),
        "{err}"
    );
    assert!(!alive(job_pid(&s)), "the job was stopped");

    let free = s.run(&["break", "--prefix", "ops", "job", "--reason", "again"]);
    assert_eq!(code(&free), 1, "{free:?}");
    assert_eq!(stdout(&free).trim(), "free: nothing broken");

    let audit = s.run(&["audit", "--prefix", "ops"]);
    assert_eq!(code(&audit), 0, "{audit:?}");
    let trail = stdout(&audit);
    let line = trail.lines().find(|l| l.contains(" break ")).unwrap();
    assert!(
        line.contains("job") && line.contains("stuck at 3 a.m.") && line.contains(" lock "),
        "{line}"
    );
    let recent = s.run(&["audit", "--prefix", "ops", "--since", "1h", "--json"]);
    assert!(
        stdout(&recent).contains(r#""action":"break""#),
        "{recent:?}"
    );
}

#[test]
fn breaking_a_permit_named_with_a_huge_index_is_a_free_key_not_a_memory_blowup() {
    // An operator's typo (or a listing's permit of a very large semaphore):
    // a permit index near u32::MAX. The command must answer "free" at
    // once. It runs under an address-space limit of 1 GiB so that a
    // command that builds a key per permit below the index (4 billion
    // strings) dies of it here instead of eating the machine's memory.
    let s = setup("bigpermit");
    let out = Command::new("prlimit")
        .arg("--as=1073741824")
        .arg(env!("CARGO_BIN_EXE_redmutex"))
        .args([
            "break",
            "__redmutex__:permit:4294967294:exports",
            "--reason",
            "typo",
        ])
        .env("REDIS_URL", s.server.url())
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{out:?}");
    assert_eq!(stdout(&out).trim(), "free: nothing broken", "{out:?}");
}

#[test]
fn list_and_audit_print_one_line_per_hold_and_event_whatever_a_key_or_reason_holds() {
    // Keys, holders' metadata and reasons are anyone's strings: a line
    // break (or a terminal escape) in one must not forge a row of `list`
    // or an event of `audit` in the operator's terminal.
    let s = setup("forged");
    let locker = redmutex::Locker::builder(redmutex::pool(&s.server.url()).unwrap())
        .prefix("ops")
        .metadata("host\nb 0 9 0\x1b[2J")
        .build()
        .unwrap();
    let key = "evil\nnightly  lock  \"x:1\"  500  7  0";
    let _held = locker.lock(key).unwrap();
    let table = stdout(&s.run(&["list", "--prefix", "ops"]));
    assert_eq!(table.lines().count(), 2, "a header and one row: {table}");
    assert!(!table.contains('\x1b'), "{table:?}");
    let forged = "stuck\n2026-11-26T05:33:58.320Z grant lock payroll \"a:1\" 5 ";
    assert!(locker.break_lock(key, forged).unwrap().is_some());
    let audit = stdout(&s.run(&["audit", "--prefix", "ops"]));
    assert_eq!(audit.lines().count(), 1, "one event: {audit}");
    assert!(!audit.contains('\x1b'), "{audit:?}");
}

/// Every `--json` output parses as JSON, whatever keys, holders, reasons
/// and leaders' values hold: `holder`, `list`, `audit` and `leader`, free
/// and held; and `list` past a lock-like key with no expiry (which printed
/// `"ms_left":-` on 7013b77, before such keys stopped being listed).
#[test]
fn every_json_output_parses() {
    let s = setup("json");
    let parse = |args: &[&str]| -> serde_json::Value {
        let out = s.run(args);
        let text = stdout(&out);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text:?}"))
    };
    let odd = "host \"q\" \\ \n\t\u{7f} \u{1b} é";
    parse(&["holder", "--prefix", "js", "--json", "free"]);
    parse(&["leader", "--prefix", "js", "--json", "nobody"]);
    parse(&["list", "--prefix", "js", "--json"]);
    parse(&["audit", "--prefix", "js", "--json"]);
    let locker = redmutex::Locker::builder(redmutex::pool(&s.server.url()).unwrap())
        .prefix("js")
        .metadata(odd)
        .audit(true)
        .build()
        .unwrap();
    let key = "k\"ey\\ \n\t\u{1b}";
    let held = locker.lock(key).unwrap();
    let leading = locker.election("e\"1").unwrap().campaign(odd).unwrap();
    let listed = parse(&["list", "--prefix", "js", "--json"]);
    assert!(
        listed.as_array().unwrap().iter().any(|h| h["key"] == key),
        "{listed}"
    );
    let holder = parse(&["holder", "--prefix", "js", "--json", key]);
    assert_eq!(holder["holder"], odd, "{holder}");
    let leader = parse(&["leader", "--prefix", "js", "--json", "e\"1"]);
    assert_eq!(leader["leader"], odd, "{leader}");
    assert!(locker.break_lock(key, "why \"now\"\n").unwrap().is_some());
    drop(held);
    drop(leading);
    let trail = parse(&["audit", "--prefix", "js", "--json"]);
    assert!(!trail.as_array().unwrap().is_empty(), "{trail}");
    // A lock-like value with no expiry: not a hold, and the listing stays
    // JSON.
    let copy = locker.lock("copied").unwrap();
    let value: String = redis::cmd("GET")
        .arg("js:copied")
        .query(&mut s.conn())
        .unwrap();
    copy.unlock().unwrap();
    let _: () = redis::cmd("SET")
        .arg("js:copied")
        .arg(value)
        .query(&mut s.conn())
        .unwrap();
    let listed = parse(&["list", "--prefix", "js", "--json"]);
    for hold in listed.as_array().unwrap() {
        assert!(hold["ms_left"].is_u64(), "{listed}");
    }
}
