//! The command's options: defaults that follow the TTL, and a `--help`
//! that tells no secret.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

/// A short `--ttl` alone works: the kill grace follows it. Only a
/// `--kill-grace` given explicitly that cannot work is a usage error.
#[test]
fn a_short_ttl_alone_works_and_only_an_explicit_grace_is_refused() {
    let s = setup("ttl");
    for ttl in ["3s", "10s", "1s"] {
        let out = s.run(&["run", "--ttl", ttl, "tkey", "--", "true"]);
        assert_eq!(code(&out), 0, "--ttl {ttl}: {out:?}");
    }
    // Renewed past its TTL, and not stopped on the way.
    let out = s.run(&["run", "--ttl", "1s", "tkey", "--", "sleep", "1.5"]);
    assert_eq!(code(&out), 0, "{out:?}");
    let out = s.run(&[
        "run",
        "--ttl",
        "3s",
        "--kill-grace",
        "2s",
        "tkey",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 64, "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--kill-grace"), "{err}");
}

/// A `--ttl` that the run accepts never stops the job by itself: with the
/// default kill grace, a TTL too short for the kill margin (50 ms at
/// least) and the renewals must be refused before the job starts (64),
/// not let it start and then stop it (70) or have the watcher kill it
/// (137) while the lease is fine.
#[test]
fn a_ttl_too_short_for_the_command_is_refused_before_the_job_starts() {
    let s = setup("ttl-short");
    let job = "echo started > \"$READY\"; sleep 0.5; echo done > \"$OUT\"";
    for ttl in ["100ms", "150ms"] {
        let _ = std::fs::remove_file(s.file("ready"));
        let _ = std::fs::remove_file(s.file("out"));
        let out = s.run(&["run", "--ttl", ttl, "shortkey", "--", "sh", "-c", job]);
        match code(&out) {
            0 => assert!(s.file("out").exists(), "--ttl {ttl}: {out:?}"),
            64 => assert!(
                !s.file("ready").exists(),
                "--ttl {ttl}: refused, but after the job started: {out:?}"
            ),
            _ => panic!("--ttl {ttl}: the job was started, then stopped: {out:?}"),
        }
    }
}

/// `--help` with a password in `REDIS_URL` does not print it; it shows
/// each default once, and its usage line does not make `--url` look
/// required.
#[test]
fn help_hides_the_url_from_the_environment() {
    let secret = "redis://:s3cret@127.0.0.1:1/";
    for args in [
        &["run", "--help"][..],
        &["holder", "--help"],
        &["help", "run"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_redmutex"))
            .args(args)
            .env("REDIS_URL", secret)
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{out:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(
            !help.contains("s3cret"),
            "{args:?} shows the password:\n{help}"
        );
        assert_eq!(
            help.matches("127.0.0.1:6379").count(),
            1,
            "{args:?}: the default URL shown once:\n{help}"
        );
        if args[0] != "holder" {
            for said in ["Unix only", "HUP INT QUIT TERM USR1", "Not covered"] {
                assert!(help.contains(said), "{args:?} does not say {said:?}");
            }
        }
        let usage = help.lines().find(|l| l.starts_with("Usage:")).unwrap();
        assert!(!usage.contains("--url"), "{usage}");
    }
}

/// `holder --json`: one JSON object with the holder, the ms left, the
/// fencing token and the number of waiters; `null`s when free.
#[test]
fn holder_json_tells_holder_time_left_token_and_waiters() {
    let s = setup("holder-json");
    let out = s.run(&["holder", "--json", "jkey"]);
    assert_eq!(code(&out), 1, "free: {out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        r#"{"prefix":null,"key":"jkey","holder":null,"ms_left":null,"fencing_token":null,"waiters":0}"#
    );
    let first = s.start(&["run", "jkey", "--", "sh", "-c", RUNS]);
    let waiter = s.cmd(&["run", "jkey", "--", "true"]).spawn().unwrap();
    wait_for("the waiter queued", || {
        let out = s.run(&["holder", "--json", "jkey"]);
        String::from_utf8(out.stdout)
            .unwrap()
            .contains(r#""waiters":1}"#)
    });
    let out = s.run(&["holder", "--json", "jkey"]);
    assert_eq!(code(&out), 0, "{out:?}");
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(
        json.starts_with(r#"{"prefix":null,"key":"jkey","holder":""#)
            && json.contains(&format!(":{}\",\"ms_left\":", first.id()))
            && json.contains(r#","fencing_token":"#),
        "{json}"
    );
    nix_term(&first);
    let _ = finish(first);
    let _ = finish(waiter);
}

/// Durations as operators write them: fractions, compound forms, and a
/// bare number of seconds as flock(1)'s `-w 10`; each taken by a real run.
#[test]
fn durations_take_fractions_compound_forms_and_bare_seconds() {
    let s = setup("durations");
    for args in [
        &["-w", "1.5s"][..],
        &["-w", "10"],
        &["-w", "0.5"],
        &["--ttl", "1h30m"],
        &["--ttl", "1m30s"],
        &["--ttl", "2.5s"],
        &["--ttl", "1500ms"],
        &["--ttl", "45"],
        &["--max-hold", "1m"],
        &["--kill-grace", "250ms", "--ttl", "1.5s"],
    ] {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["dkey", "--", "true"]);
        let out = s.run(&all);
        assert_eq!(code(&out), 0, "{args:?}: {out:?}");
    }
    for bad in ["1.5.5s", "s", "-1s", "1x", "1h-30m", "", "1.s5"] {
        let out = s.run(&["run", "-w", bad, "dkey", "--", "true"]);
        assert_eq!(code(&out), 64, "-w {bad:?}: {out:?}");
    }
}

/// What the command echoes of a duration reads as the user wrote it:
/// `--ttl 0s` is `0s`, not `0ns`; the limits it names read the same way.
#[test]
fn durations_are_echoed_as_written() {
    let s = setup("echo");
    let out = s.run(&["run", "--ttl", "0s", "ekey", "--", "true"]);
    assert_eq!(code(&out), 64, "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--ttl 0s "), "{err}");
    assert!(!err.contains("ns"), "{err}");
    let out = s.run(&["run", "--ttl", "250ms", "ekey", "--", "true"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--ttl 250ms is below the command's minimum of 300ms"),
        "{err}"
    );
    let out = s.run(&[
        "run",
        "--ttl",
        "1.5s",
        "--kill-grace",
        "1s",
        "ekey",
        "--",
        "true",
    ]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--kill-grace 1s plus the kill margin (150ms)")
            && err.contains("half the TTL (750ms)"),
        "{err}"
    );
}
