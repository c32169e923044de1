//! Every majority decision, as pure functions over the instances' answers
//! (the fan-out that collects them is `raw/redlock.rs`'s). With one
//! instance every rule below reduces to "what that instance said"; with
//! N independent masters it is Redlock.

use std::time::Duration;

use crate::info::LockInfo;
use crate::Error;

/// Instances needed for a decision: a strict majority.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Whether an instance's error `e` counts as no answer: the call did not
/// reach it (a connection failure, see [`Error::is_connection`]), or the
/// server refused it for a moment (see [`refused_for_a_moment`]). Either
/// way nothing ran there, and the call may run once it answers: a
/// release is sent there again (see `raw/later.rs`).
pub(crate) fn unanswered(e: &Error) -> bool {
    e.is_connection() || matches!(e, Error::Redis(r) if refused_for_a_moment(r))
}

/// Whether a server refused a command for a moment, and ran nothing: too
/// busy to run anything (`BUSY`, a script past the busy threshold;
/// `LOADING`, a restart reading its data), waiting for its cluster or its
/// master (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, which redis-rs itself
/// waits out and retries), or refusing writes for now (`NOREPLICAS`, its
/// replicas lagging behind `min-replicas-to-write`; `READONLY`, a master
/// demoted by a failover, whose Sentinel pool reaches the new master on
/// its next connection): a script is stopped at its first write, so
/// nothing is written. Not a refusal of what was asked. Redis 6.2 words
/// a refusal met inside a script as the script's error (`ERR Error running
/// script (call to f_...): @user_script:1: ... -NOREPLICAS Not enough good
/// replicas to write.`), with the refusal's code after its ` -`.
pub(crate) fn refused_for_a_moment(e: &redis::RedisError) -> bool {
    const PASSING: [&str; 7] = [
        "BUSY",
        "LOADING",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "MASTERDOWN",
        "NOREPLICAS",
        "READONLY",
    ];
    let in_script = || {
        e.detail()
            .filter(|d| e.code() == Some("ERR") && d.starts_with("Error running script"))
            .and_then(|d| d.rsplit_once(" -"))
            .and_then(|(_, refusal)| refusal.split(' ').next())
    };
    e.code()
        .into_iter()
        .chain(in_script())
        .any(|c| PASSING.contains(&c))
}

/// What is left of a lease of `ttl` after `elapsed` and the `drift`
/// allowance; `None` when nothing is.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)
        .and_then(|d| d.checked_sub(drift))
        .filter(|d| !d.is_zero())
}

/// One instance's answer to an acquire.
#[derive(Debug)]
pub(crate) enum Grant {
    /// Took every key; the fencing token it minted.
    Granted(u64),
    /// A key was held; the PTTL of the first busy key, if it has one.
    Busy(Option<Duration>),
    /// A key is in its lock-delay (its lease ended without a release) for
    /// this long still.
    Delayed(Duration),
}

/// The decision over all instances' answers to one acquire attempt.
#[derive(Debug)]
pub(crate) enum Acquired {
    /// A majority granted within the validity; the largest token minted.
    /// `everywhere`: every instance granted, and minted that same token,
    /// so that they are as the grant's write-back would leave them.
    Granted { fence: u64, everywhere: bool },
    /// Held elsewhere: wait and retry. The shortest PTTL among busy keys,
    /// and the shortest lock-delay left among delayed ones.
    Busy {
        holder_ttl: Option<Duration>,
        delay: Option<Duration>,
    },
    /// Errors (or slowness) made a majority impossible.
    NoQuorum { granted: usize, last: Option<Error> },
}

pub(crate) fn decide_acquire(
    answers: Vec<Result<Grant, Error>>,
    ttl: Duration,
    elapsed: Duration,
    drift: Duration,
) -> Acquired {
    let n = answers.len();
    let q = quorum(n);
    let (mut granted, mut failed, mut fence, mut holder_ttl, mut last) =
        (0usize, 0usize, 0u64, None::<Duration>, None);
    let mut lowest = u64::MAX;
    let mut delay = None::<Duration>;
    for a in answers {
        match a {
            Ok(Grant::Granted(f)) => {
                granted += 1;
                fence = fence.max(f);
                lowest = lowest.min(f);
            }
            Ok(Grant::Busy(t)) => {
                if let Some(t) = t {
                    holder_ttl = Some(holder_ttl.map_or(t, |h: Duration| h.min(t)));
                }
            }
            Ok(Grant::Delayed(t)) => delay = Some(delay.map_or(t, |d: Duration| d.min(t))),
            Err(e) => {
                failed += 1;
                last = Some(e);
            }
        }
    }
    if granted >= q {
        if validity(ttl, elapsed, drift).is_some() {
            let everywhere = granted == n && lowest == fence;
            return Acquired::Granted { fence, everywhere };
        }
        return Acquired::NoQuorum { granted, last };
    }
    if failed > n - q {
        return Acquired::NoQuorum { granted, last };
    }
    Acquired::Busy { holder_ttl, delay }
}

/// One instance's answer to an owner-checked renewal.
pub(crate) type Renewed = bool;

/// The decision over all instances' answers to one renewal.
#[derive(Debug)]
pub(crate) enum RenewDecision {
    /// A majority confirmed. `rival`: an instance answered that another
    /// client holds the key there (a rival's attempt, for a moment), so
    /// the next renewal should come soon to take it back.
    Confirmed { rival: bool },
    /// A majority can no longer confirm: the keys are gone or someone else's.
    Lost,
    /// Errors left it open; retry while the lease lasts.
    Failed {
        confirmed: usize,
        last: Option<Error>,
    },
}

pub(crate) fn decide_renew(answers: Vec<Result<Renewed, Error>>) -> RenewDecision {
    let n = answers.len();
    let q = quorum(n);
    let confirmed = answers.iter().filter(|a| matches!(a, Ok(true))).count();
    let refused = answers.iter().filter(|a| matches!(a, Ok(false))).count();
    if confirmed >= q {
        RenewDecision::Confirmed { rival: refused > 0 }
    } else if refused > n - q {
        RenewDecision::Lost
    } else {
        let last = answers.into_iter().filter_map(Result::err).next_back();
        RenewDecision::Failed { confirmed, last }
    }
}

/// The decision over all instances' answers to a Redlock write-back
/// (`RAISE_FENCE`): each answer says whether the lock is ours there now.
#[derive(Debug)]
pub(crate) enum Raised {
    /// A majority answered, and every instance that answered has the lock.
    Everywhere,
    /// A majority answered, and a rival holds the lock on one of them.
    Rival,
    /// Too few answered.
    NoQuorum {
        confirmed: usize,
        last: Option<Error>,
    },
}

pub(crate) fn decide_raise(answers: Vec<Result<bool, Error>>) -> Raised {
    let confirmed = answers.iter().filter(|r| r.is_ok()).count();
    if confirmed >= quorum(answers.len()) {
        if answers.iter().any(|r| matches!(r, Ok(false))) {
            Raised::Rival
        } else {
            Raised::Everywhere
        }
    } else {
        let last = answers.into_iter().filter_map(Result::err).next_back();
        Raised::NoQuorum { confirmed, last }
    }
}

/// The decision over all instances' answers to a release: each answer says
/// whether every key was still ours there (and is now deleted).
#[derive(Debug)]
pub(crate) enum Released {
    /// A majority still had the lock: a clean release.
    Clean,
    /// A majority no longer had it: the lease had been lost.
    Lost,
    /// Errors left it open.
    Unknown { ours: usize, last: Option<Error> },
}

pub(crate) fn decide_release(answers: Vec<Result<bool, Error>>) -> Released {
    let n = answers.len();
    let q = quorum(n);
    let (mut ours, mut not_ours, mut last) = (0usize, 0usize, None);
    for a in answers {
        match a {
            Ok(true) => ours += 1,
            Ok(false) => not_ours += 1,
            Err(e) => last = Some(e),
        }
    }
    if ours >= q {
        Released::Clean
    } else if not_ours > n - q {
        Released::Lost
    } else {
        Released::Unknown { ours, last }
    }
}

/// The holder a majority agrees on (same fencing token), with the shortest
/// TTL among them; `Ok(None)` when no holder has a majority and enough
/// instances answered to say so.
pub(crate) fn decide_holder(
    answers: Vec<Result<Option<LockInfo>, Error>>,
) -> Result<Option<LockInfo>, Acquired> {
    let n = answers.len();
    let q = quorum(n);
    let mut infos: Vec<LockInfo> = Vec::new();
    let (mut failed, mut last) = (0usize, None);
    for a in answers {
        match a {
            Ok(Some(info)) => infos.push(info),
            Ok(None) => {}
            Err(e) => {
                failed += 1;
                last = Some(e);
            }
        }
    }
    for candidate in &infos {
        let same: Vec<&LockInfo> = infos
            .iter()
            .filter(|i| i.fencing_token == candidate.fencing_token)
            .collect();
        if same.len() >= q {
            let ttl = same.iter().map(|i| i.ttl).min().unwrap_or(candidate.ttl);
            return Ok(Some(LockInfo {
                ttl,
                ..candidate.clone()
            }));
        }
    }
    if failed > n - q {
        return Err(Acquired::NoQuorum { granted: 0, last });
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn err() -> Error {
        Error::InvalidInput("down".into())
    }

    /// The error of a server's reply `line` (`-CODE detail`).
    fn replied(line: &str) -> redis::RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(redis::Value::ServerError(e)) => e.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn a_refusal_for_a_moment_counts_as_no_answer() {
        for line in [
            "BUSY Redis is busy running a script",
            "LOADING Redis is loading the dataset in memory",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
            "MASTERDOWN Link with MASTER is down",
            "NOREPLICAS Not enough good replicas to write.",
            "READONLY You can't write against a read only replica.",
            // Redis 6.2, a refusal met inside a script.
            "ERR Error running script (call to f_98b2b88b1aa43ae891c8e2859ad7d9cd48c1c784): \
             @user_script:1: @user_script: 1: -NOREPLICAS Not enough good replicas to write.",
        ] {
            assert!(refused_for_a_moment(&replied(line)), "{line}");
            assert!(unanswered(&Error::Redis(replied(line))), "{line}");
        }
        for line in [
            "ERR unknown command",
            "NOPERM no rights",
            "NOSCRIPT none",
            "ERR Error running script (call to f_98b2): @user_script:1: -WRONGTYPE Operation \
             against a key holding the wrong kind of value",
        ] {
            assert!(!refused_for_a_moment(&replied(line)), "{line}");
            assert!(!unanswered(&Error::Redis(replied(line))), "{line}");
        }
        let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "late");
        assert!(unanswered(&Error::Redis(timeout.into())));
        assert!(!unanswered(&err()));
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(5), 3);
    }

    #[test]
    fn validity_never_underflows() {
        assert_eq!(validity(100 * MS, 10 * MS, 3 * MS), Some(87 * MS));
        assert_eq!(validity(100 * MS, 97 * MS, 3 * MS), None);
        assert_eq!(validity(100 * MS, 200 * MS, 3 * MS), None);
        assert_eq!(validity(100 * MS, Duration::MAX, Duration::MAX), None);
    }

    #[test]
    fn majority_grants_with_the_largest_token() {
        let a = vec![
            Ok(Grant::Granted(7)),
            Err(err()),
            Ok(Grant::Granted(9)),
            Ok(Grant::Busy(Some(50 * MS))),
            Ok(Grant::Granted(8)),
        ];
        match decide_acquire(a, 1000 * MS, 10 * MS, 12 * MS) {
            Acquired::Granted { fence, everywhere } => {
                assert_eq!(fence, 9);
                assert!(!everywhere);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_slow_majority_is_no_grant() {
        let a = vec![Ok(Grant::Granted(1)), Ok(Grant::Granted(2)), Err(err())];
        assert!(matches!(
            decide_acquire(a, 100 * MS, 99 * MS, 3 * MS),
            Acquired::NoQuorum { granted: 2, .. }
        ));
    }

    #[test]
    fn contention_waits_but_errors_beyond_the_margin_fail() {
        let busy = vec![
            Ok(Grant::Granted(1)),
            Ok(Grant::Busy(Some(40 * MS))),
            Ok(Grant::Busy(Some(30 * MS))),
        ];
        assert!(matches!(
            decide_acquire(busy, 1000 * MS, MS, MS),
            Acquired::Busy { holder_ttl: Some(t), delay: None } if t == 30 * MS
        ));
        // A lock-delay on a master: come back when the shortest ends.
        let delayed = vec![
            Ok(Grant::Delayed(700 * MS)),
            Ok(Grant::Delayed(500 * MS)),
            Ok(Grant::Busy(Some(40 * MS))),
        ];
        assert!(matches!(
            decide_acquire(delayed, 1000 * MS, MS, MS),
            Acquired::Busy { holder_ttl: Some(_), delay: Some(d) } if d == 500 * MS
        ));
        let down = vec![Ok(Grant::Granted(1)), Err(err()), Err(err())];
        assert!(matches!(
            decide_acquire(down, 1000 * MS, MS, MS),
            Acquired::NoQuorum {
                granted: 1,
                last: Some(_)
            }
        ));
        // 5 instances, 2 down: still a decision by the other 3.
        let two_down = vec![
            Ok(Grant::Busy(None)),
            Ok(Grant::Busy(None)),
            Ok(Grant::Busy(None)),
            Err(err()),
            Err(err()),
        ];
        assert!(matches!(
            decide_acquire(two_down, 1000 * MS, MS, MS),
            Acquired::Busy { .. }
        ));
    }

    #[test]
    fn one_token_from_every_instance_is_a_grant_everywhere() {
        let same = || (0..3).map(|_| Ok(Grant::Granted(5))).collect::<Vec<_>>();
        assert!(matches!(
            decide_acquire(same(), 1000 * MS, MS, MS),
            Acquired::Granted {
                fence: 5,
                everywhere: true
            }
        ));
        // Two tokens, or one instance short: the write-back is needed.
        let apart = vec![
            Ok(Grant::Granted(5)),
            Ok(Grant::Granted(6)),
            Ok(Grant::Granted(5)),
        ];
        let short = vec![Ok(Grant::Granted(5)), Ok(Grant::Granted(5)), Err(err())];
        for answers in [apart, short] {
            assert!(matches!(
                decide_acquire(answers, 1000 * MS, MS, MS),
                Acquired::Granted {
                    everywhere: false,
                    ..
                }
            ));
        }
    }

    #[test]
    fn single_instance_rules_are_plain() {
        assert!(matches!(
            decide_acquire(vec![Ok(Grant::Granted(3))], 1000 * MS, MS, MS),
            Acquired::Granted {
                fence: 3,
                everywhere: true
            }
        ));
        assert!(matches!(
            decide_acquire(vec![Err(err())], 1000 * MS, MS, MS),
            Acquired::NoQuorum { granted: 0, .. }
        ));
        assert!(matches!(
            decide_renew(vec![Ok(true)]),
            RenewDecision::Confirmed { rival: false }
        ));
        assert!(matches!(decide_renew(vec![Ok(false)]), RenewDecision::Lost));
        assert!(matches!(
            decide_renew(vec![Err(err())]),
            RenewDecision::Failed {
                confirmed: 0,
                last: Some(_)
            }
        ));
    }

    #[test]
    fn renew_and_release_on_a_majority() {
        let r = vec![Ok(true), Ok(false), Err(err()), Ok(true), Ok(true)];
        assert!(matches!(
            decide_renew(r),
            RenewDecision::Confirmed { rival: true }
        ));
        let r = vec![Ok(true), Ok(false), Ok(false), Ok(false), Err(err())];
        assert!(matches!(decide_renew(r), RenewDecision::Lost));
        let r = vec![Ok(true), Ok(true), Ok(false), Err(err()), Err(err())];
        assert!(matches!(
            decide_renew(r),
            RenewDecision::Failed {
                confirmed: 2,
                last: Some(_)
            }
        ));
        assert!(matches!(
            decide_raise(vec![Ok(true), Ok(true), Err(err())]),
            Raised::Everywhere
        ));
        assert!(matches!(
            decide_raise(vec![Ok(true), Ok(false), Err(err())]),
            Raised::Rival
        ));
        assert!(matches!(
            decide_raise(vec![Ok(true), Err(err()), Err(err())]),
            Raised::NoQuorum {
                confirmed: 1,
                last: Some(_)
            }
        ));
        assert!(matches!(
            decide_release(vec![Ok(true), Ok(true), Err(err())]),
            Released::Clean
        ));
        assert!(matches!(
            decide_release(vec![Ok(false), Ok(false), Ok(true)]),
            Released::Lost
        ));
        assert!(matches!(
            decide_release(vec![Ok(true), Err(err()), Err(err())]),
            Released::Unknown {
                ours: 1,
                last: Some(_)
            }
        ));
    }

    #[test]
    fn holder_needs_a_majority_on_one_token() {
        let info = |fence, ttl_ms| LockInfo {
            key: "k".into(),
            name: "k".into(),
            metadata: "m".into(),
            ttl: ttl_ms * MS,
            fencing_token: fence,
            ..LockInfo::blank()
        };
        let got = decide_holder(vec![Ok(Some(info(5, 90))), Ok(Some(info(5, 80))), Ok(None)]);
        assert_eq!(got.unwrap().unwrap().ttl(), 80 * MS);
        let split = decide_holder(vec![Ok(Some(info(5, 90))), Ok(Some(info(6, 80))), Ok(None)]);
        assert_eq!(split.unwrap(), None);
        assert!(decide_holder(vec![Ok(None), Err(err()), Err(err())]).is_err());
    }
}
