//! The operator's commands are never misled by a prefix (issue 43): holds
//! of two prefixes, a nested one and none, taken by real `redmutex run`
//! processes (and the library); `list` and `audit` without `--prefix` show
//! every prefix's in a column; `holder`, `break` and `leader` of a key
//! given with no prefix or the wrong one find it under its own prefix or
//! name where it is held; a break told through another prefix reaches its
//! holder with the operator's reason, and writes nothing at the root.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // tests poll with short sleeps

mod common;

use common::*;
use std::process::{Child, Output};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that `out` said on stderr where `jobs` holds what it asked for.
fn names_jobs(out: &Output) {
    assert!(
        stderr(out).contains("prefix \"jobs\""),
        "{out:?}: {}",
        stderr(out)
    );
}

/// The output of `run` once it ends; killed after 30 s (a run that was
/// never told of its break runs on), which the caller's asserts then show.
fn ended(mut run: Child) -> Output {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while run.try_wait().unwrap().is_none() && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = run.kill();
    finish(run)
}

/// Asserts that the run `ended` was stopped by a break for `reason` (exit
/// 70, the operator's reason told).
fn broken_for(ended: &Output, reason: &str) {
    assert_eq!(code(ended), 70, "{ended:?}");
    assert!(
        stderr(ended).contains(&format!("broken by an operator: {reason}")),
        "the holder was not told the operator's reason: {}",
        stderr(ended)
    );
}

/// A library locker of `prefix` (none: `None`) with `metadata`.
fn locker(s: &Setup, prefix: Option<&str>, metadata: &str) -> redmutex::Locker {
    let mut b = redmutex::Locker::builder(redmutex::pool(&s.server.url()).unwrap())
        .metadata(metadata)
        .audit(true);
    if let Some(p) = prefix {
        b = b.prefix(p);
    }
    b.build().unwrap()
}

/// Every key of the database, by a `SCAN` walk.
fn keys(s: &Setup) -> Vec<String> {
    let mut c = s.conn();
    let (mut cursor, mut out) = (0u64, Vec::new());
    loop {
        let (next, mut some): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(100)
            .query(&mut c)
            .unwrap();
        out.append(&mut some);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    out.sort();
    out
}

/// The keys of no prefix's own, and those under `prefix`, among `keys`.
fn strays<'a>(keys: &'a [String], prefix: &str) -> Vec<&'a String> {
    keys.iter()
        .filter(|k| k.starts_with("__redmutex__:") || k.starts_with(&format!("{prefix}:")))
        .collect()
}

/// Runs queued for a lock, killed if a test ends before they do.
struct Queued(Vec<Child>);

impl Drop for Queued {
    fn drop(&mut self) {
        for q in &mut self.0 {
            let _ = q.kill();
            let _ = q.wait();
        }
    }
}

/// `redmutex run --prefix jobs nr` holding (a job that runs until
/// stopped), with `waiters` more runs queued behind it.
fn jobs_nr(s: &Setup, waiters: usize) -> (Child, Queued) {
    let run = s.start(&[
        "run", "--prefix", "jobs", "--ttl", "900ms", "nr", "--", "sh", "-c", RUNS,
    ]);
    let mut queued = Queued(Vec::new());
    for _ in 0..waiters {
        queued.0.push(
            s.cmd(&["run", "--prefix", "jobs", "nr", "--", "true"])
                .spawn()
                .unwrap(),
        );
    }
    let want = format!("\"waiters\":{waiters}");
    wait_for("the waiters queued", || {
        stdout(&s.run(&["holder", "--prefix", "jobs", "--json", "nr"])).contains(&want)
    });
    (run, queued)
}

/// Stops the run and lets the queued ones take the lock and end.
fn stop(run: Child, mut queued: Queued) {
    nix_term(&run);
    let _ = finish(run);
    for q in std::mem::take(&mut queued.0) {
        let _ = finish_within(q);
    }
}

/// The rows of `list`'s table, each split at its blanks.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn list_without_a_prefix_shows_every_prefixs_holds_with_the_prefix_in_a_column() {
    let s = setup("listall");
    let (run, queued) = jobs_nr(&s, 2);
    let ops = locker(&s, Some("ops"), "ops-host");
    let team = locker(&s, Some("jobs:team"), "team-host");
    let bare = locker(&s, None, "bare-host");
    let held = (
        ops.lock("nr").unwrap(),
        team.lock("nr").unwrap(),
        bare.lock("solo").unwrap(),
    );

    let out = s.run(&["list"]);
    assert_eq!(code(&out), 0, "{out:?}");
    let table = stdout(&out);
    let header = table.lines().next().unwrap();
    assert!(
        header.starts_with("PREFIX") && header.contains(" KEY "),
        "{table}"
    );
    // (prefix, key, waiters) of each row.
    let seen: Vec<(String, String, String)> = rows(&table)
        .into_iter()
        .map(|r| (r[0].clone(), r[1].clone(), r.last().unwrap().clone()))
        .collect();
    let want = [
        ("-", "solo", "0"),
        ("jobs", "nr", "2"),
        ("jobs:team", "nr", "0"),
        ("ops", "nr", "0"),
    ]
    .map(|(p, k, w)| (p.to_owned(), k.to_owned(), w.to_owned()));
    assert_eq!(seen, want, "{table}");

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&s.run(&["list", "--json"]))).unwrap();
    let prefixes: Vec<serde_json::Value> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["prefix"].clone())
        .collect();
    assert_eq!(
        prefixes,
        [
            serde_json::Value::Null,
            "jobs".into(),
            "jobs:team".into(),
            "ops".into()
        ],
        "{json}"
    );

    // A prefix's listing holds those nested in it, each with its own.
    let nested = rows(&stdout(&s.run(&["list", "--prefix", "jobs"])));
    let seen: Vec<(&str, &str)> = nested.iter().map(|r| (&*r[0], &*r[1])).collect();
    assert_eq!(seen, [("jobs", "nr"), ("jobs:team", "nr")], "{nested:?}");
    drop(held);
    stop(run, queued);
}

#[test]
fn holder_of_a_key_given_with_no_or_the_wrong_prefix_is_found_or_named() {
    let s = setup("holderprefix");
    let (run, queued) = jobs_nr(&s, 2);

    // Its full key without a prefix: found under its own, waiters and all.
    let out = s.run(&["holder", "jobs:nr"]);
    assert_eq!(code(&out), 0, "{out:?}");
    let said = stdout(&out);
    assert!(
        said.contains("2 waiting") && said.contains("prefix \"jobs\""),
        "{said}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&s.run(&["holder", "--json", "jobs:nr"]))).unwrap();
    assert_eq!(
        (&json["prefix"], &json["waiters"]),
        (&"jobs".into(), &2.into()),
        "{json}"
    );

    // Its key with no prefix, or the wrong one: free there, and where it
    // is held said.
    for args in [&["holder", "nr"][..], &["holder", "--prefix", "job", "nr"]] {
        let out = s.run(args);
        assert_eq!((code(&out), stdout(&out).trim()), (1, "free"), "{args:?}");
        names_jobs(&out);
    }
    stop(run, queued);
}

#[test]
fn a_break_of_a_key_given_with_no_or_the_wrong_prefix_is_refused_or_reaches_its_holder() {
    let s = setup("breakprefix");
    let (run, mut queued) = jobs_nr(&s, 1);

    // The wrong prefix, or none: nothing there, nothing broken, nothing
    // written, and where it is held said.
    for args in [
        &["break", "nr", "--reason", "wrong"][..],
        &["break", "--prefix", "job", "nr", "--reason", "wrong"],
    ] {
        let before = keys(&s);
        let out = s.run(args);
        assert_eq!(
            (code(&out), stdout(&out).trim()),
            (1, "free: nothing broken"),
            "{args:?}"
        );
        names_jobs(&out);
        let after = keys(&s);
        assert_eq!(strays(&after, "job"), [] as [&String; 0], "{after:?}");
        assert_eq!(
            after.iter().filter(|k| !before.contains(k)).count(),
            0,
            "{before:?} -> {after:?}"
        );
    }

    // Its full key without a prefix: broken as its own prefix would.
    let out = s.run(&["break", "jobs:nr", "--reason", "host gone"]);
    assert_eq!(code(&out), 0, "{out:?}");
    assert!(stdout(&out).contains("prefix \"jobs\""), "{out:?}");
    broken_for(&ended(run), "host gone");
    let after = keys(&s);
    assert_eq!(strays(&after, "job"), [] as [&String; 0], "{after:?}");
    // In its prefix's trail.
    let trail = stdout(&s.run(&["audit", "--prefix", "jobs"]));
    assert!(
        trail
            .lines()
            .any(|l| l.contains(" break ") && l.contains("host gone")),
        "{trail}"
    );
    for q in std::mem::take(&mut queued.0) {
        let _ = finish_within(q);
    }
}

#[test]
fn a_break_through_the_outer_prefix_reaches_the_holder_of_a_nested_one() {
    let s = setup("breaknested");
    let run = s.start(&[
        "run",
        "--prefix",
        "jobs:team",
        "--ttl",
        "900ms",
        "nr",
        "--",
        "sh",
        "-c",
        RUNS,
    ]);
    let out = s.run(&["break", "--prefix", "jobs", "team:nr", "--reason", "drain"]);
    assert_eq!(code(&out), 0, "{out:?}");
    broken_for(&ended(run), "drain");
    let trail = stdout(&s.run(&["audit", "--prefix", "jobs:team"]));
    assert!(trail.contains("drain"), "{trail}");
    let after = keys(&s);
    assert!(
        !after.iter().any(|k| k.starts_with("jobs:__redmutex__:")),
        "written under the outer prefix: {after:?}"
    );
}

#[test]
fn audit_without_a_prefix_shows_every_prefixs_trail_with_the_prefix_in_a_column() {
    let s = setup("auditall");
    for prefix in [Some("jobs"), Some("ops"), None] {
        let l = locker(&s, prefix, "host");
        let _held = l.lock("nr").unwrap();
        l.break_lock("nr", "drill").unwrap().unwrap();
    }
    let out = s.run(&["audit"]);
    assert_eq!(code(&out), 0, "{out:?}");
    let trail = stdout(&out);
    // `<time> <prefix> <action> <kind> <key> ...`, of each break.
    let mut breaks: Vec<(String, String)> = trail
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f[2] == "break")
        .map(|f| (f[1].to_owned(), f[4].to_owned()))
        .collect();
    breaks.sort();
    assert_eq!(
        breaks,
        [("-", "nr"), ("jobs", "nr"), ("ops", "nr")].map(|(p, k)| (p.to_owned(), k.to_owned())),
        "{trail}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&s.run(&["audit", "--json"]))).unwrap();
    assert!(
        json.as_array()
            .unwrap()
            .iter()
            .any(|e| e["prefix"] == "ops" && e["action"] == "break"),
        "{json}"
    );
    // A prefix without a trail: nothing printed, and where trails are said.
    let out = s.run(&["audit", "--prefix", "job"]);
    assert_eq!((code(&out), stdout(&out).as_str()), (0, ""), "{out:?}");
    let said = stderr(&out);
    assert!(
        said.contains("prefix \"jobs\"") && said.contains("prefix \"ops\""),
        "{said}"
    );
}

#[test]
fn leader_of_an_election_given_with_the_wrong_prefix_names_where_it_is_led() {
    let s = setup("leaderprefix");
    let l = locker(&s, Some("jobs"), "host");
    let _leading = l.election("primary").unwrap().campaign("node-1").unwrap();
    let out = s.run(&["leader", "primary"]);
    assert_eq!(
        (code(&out), stdout(&out).trim()),
        (1, "no leader"),
        "{out:?}"
    );
    names_jobs(&out);
    let out = s.run(&["leader", "--prefix", "jobs", "primary"]);
    assert_eq!(code(&out), 0, "{out:?}");
    // `observe` says it too, when it starts, and follows the name asked.
    let mut observer = s.cmd(&["observe", "primary"]).spawn().unwrap();
    let err = observer.stderr.take().unwrap();
    let (tx, said) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(err), &mut line);
        let _ = tx.send(line);
    });
    let line = said.recv_timeout(std::time::Duration::from_secs(20));
    observer.kill().unwrap();
    observer.wait().unwrap();
    let line = line.unwrap();
    assert!(line.contains("prefix \"jobs\""), "{line}");
}

/// The `SCAN` steps (from scripts too) the server ran since the last
/// `CONFIG RESETSTAT`.
fn scan_calls(s: &Setup) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut s.conn())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_hint_of_where_else_a_free_name_is_held_costs_a_bounded_walk() {
    // `holder`, `break` and `leader` of a name found free look for it under
    // every prefix (a hint on stderr, after the answer). On 1cf7f9e that
    // was a walk of the whole database (about one round trip per 500
    // keys) on every free answer: a script polling `redmutex holder` on a
    // database of millions of keys walked them all each time. The walk is
    // bounded, and said so when not made.
    let s = setup("hintcost");
    let mut c = s.conn();
    for chunk in 0..15 {
        let mut mset = redis::cmd("MSET");
        for i in 0..10_000 {
            mset.arg(format!("bulk:{chunk}:{i}")).arg("x");
        }
        let _: () = mset.query(&mut c).unwrap();
    }
    // `audit --prefix` walks the database for the prefix's trails (the
    // answer itself, as `list --prefix` does for its holds); its hint
    // comes on top.
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    assert_eq!(code(&s.run(&["list", "--prefix", "nope"])), 0);
    let answer = scan_calls(&s);
    for (args, own) in [
        (&["holder", "nope"][..], 0),
        (&["break", "nope", "--reason", "r"], 0),
        (&["leader", "nope"], 0),
        (&["audit", "--prefix", "nope"], answer),
    ] {
        let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
        let out = s.run(args);
        let code = code(&out);
        assert!(code == 0 || code == 1, "{args:?}: {out:?}");
        let steps = scan_calls(&s) - own;
        assert!(
            steps <= 200,
            "{args:?}: {steps} SCAN steps for a hint over 150,000 keys"
        );
        assert!(
            stderr(&out).contains("150000 keys"),
            "{args:?}: the hint not made is not said: {}",
            stderr(&out)
        );
    }
}

#[test]
fn a_lock_of_no_prefix_asked_through_a_prefix_is_named_and_its_break_reaches_its_holder() {
    // `run jobs:nr` (no prefix) holds key `jobs:nr`, which `--prefix jobs`
    // names `nr`. On 1cf7f9e `holder --prefix jobs nr` said it held with
    // no word of its prefix (and read the waiters of `jobs`); once `jobs`
    // had granted any lock, `break --prefix jobs nr` broke it as `jobs`'s,
    // and the run was told "Redis showed the key gone or someone else's".
    let s = setup("outerbreak");
    let run = s.start(&["run", "--ttl", "900ms", "jobs:nr", "--", "sh", "-c", RUNS]);
    let out = s.run(&["holder", "--prefix", "jobs", "nr"]);
    assert_eq!(code(&out), 0, "{out:?}");
    assert!(stdout(&out).contains("of no prefix"), "{}", stdout(&out));
    let took = s.run(&["run", "--prefix", "jobs", "other", "--", "true"]);
    assert_eq!(code(&took), 0, "{took:?}");
    let out = s.run(&["break", "--prefix", "jobs", "nr", "--reason", "drain"]);
    if code(&out) == 0 {
        broken_for(&ended(run), "drain");
    } else {
        assert_eq!(code(&out), 64, "{out:?}");
        assert!(stderr(&out).contains("no prefix"), "{}", stderr(&out));
        nix_term(&run);
        let _ = finish_within(run);
    }
}
