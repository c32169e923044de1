//! `redmutex leader` prints an election's leader (or `--json`), and
//! `redmutex observe` prints each change as a line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods)] // a reader thread of the observer's lines

mod common;

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

use common::{code, setup};

const LONG: Duration = Duration::from_secs(20);

#[test]
fn leader_prints_the_leader_or_says_there_is_none() {
    let s = setup("leader");
    let out = s.run(&["leader", "sched"]);
    assert_eq!(code(&out), 1, "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "no leader\n");
    let out = s.run(&["leader", "--json", "sched"]);
    assert_eq!(code(&out), 1, "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        r#"{"election":"sched","leader":null,"term":null,"ms_left":null,"queued":[]}"#
    );
    let locker = redmutex::Locker::open(&s.server.url()).unwrap();
    let leadership = locker
        .election("sched")
        .unwrap()
        .campaign("10.0.0.7:8080")
        .unwrap();
    let term = leadership.term();
    let out = s.run(&["leader", "sched"]);
    assert_eq!(code(&out), 0, "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("led by \"10.0.0.7:8080\", term {term}, ")),
        "{text}"
    );
    let out = s.run(&["leader", "--json", "sched"]);
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(
        json.starts_with(&format!(
            r#"{{"election":"sched","leader":"10.0.0.7:8080","term":{term},"ms_left":"#
        )),
        "{json}"
    );
    assert!(json.ends_with(",\"queued\":[]}\n"), "{json}");
    // Not a lock of the same name.
    let out = s.run(&["holder", "sched"]);
    assert_eq!(code(&out), 1, "{out:?}");

    // Candidates queued are shown, in their order.
    let queue = |n: u64| {
        redis::cmd("ZCARD")
            .arg("__redmutex__:election-queue:sched")
            .query::<u64>(
                &mut redis::Client::open(s.server.url())
                    .unwrap()
                    .get_connection()
                    .unwrap(),
            )
            .unwrap()
            == n
    };
    let candidates: Vec<_> = ["v2", "v3"]
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let election = locker.election("sched").unwrap();
            let value = value.to_owned();
            let t = std::thread::spawn(move || election.campaign_timeout(value, LONG).map(drop));
            let deadline = std::time::Instant::now() + LONG;
            while !queue(i as u64 + 1) {
                assert!(std::time::Instant::now() < deadline, "not queued");
                std::thread::sleep(Duration::from_millis(20));
            }
            t
        })
        .collect();
    let out = s.run(&["leader", "sched"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.ends_with("\nqueued: \"v2\", \"v3\"\n"), "{text}");
    let out = s.run(&["leader", "--json", "sched"]);
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(json.ends_with(",\"queued\":[\"v2\",\"v3\"]}\n"), "{json}");
    leadership.resign().unwrap();
    for t in candidates {
        t.join().unwrap().unwrap();
    }
}

#[test]
fn observe_prints_each_change_as_a_line() {
    let s = setup("observe");
    let mut observer = s.cmd(&["observe", "jobs"]).spawn().unwrap();
    let stdout = observer.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let next = || lines.recv_timeout(LONG).unwrap();
    assert_eq!(next(), "no leader");
    let locker = redmutex::Locker::open(&s.server.url()).unwrap();
    let leadership = locker.election("jobs").unwrap().campaign("a").unwrap();
    let term = leadership.term();
    assert!(next().starts_with(&format!("led by \"a\", term {term}")));
    leadership.proclaim("b").unwrap();
    assert!(next().starts_with(&format!("led by \"b\", term {term}")));
    leadership.resign().unwrap();
    assert_eq!(next(), "no leader");
    observer.kill().unwrap();
    observer.wait().unwrap();
}
