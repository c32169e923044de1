//! Every reply of the scripts parsed, in one place (the lock's stored
//! value is built and parsed in `value.rs`). An error names a reply's
//! shape, never its contents: a reply may hold another holder's owner
//! token.

use std::time::Duration;

use redis::Value;

use crate::info::{Leader, LockInfo, LockKind};
use crate::protocol::named::{Named, Target};
use crate::protocol::value::LockValue;
use crate::quorum::Grant;
use crate::Error;

/// A lock that a release handed over to a waiter: its owner token and
/// fencing token.
pub(crate) type Handed = (String, u64);

/// The error for a reply that does not parse. It names the reply's shape,
/// never its contents: a reply may hold another holder's owner token.
pub(crate) fn unexpected(what: &str, reply: &Value) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected script reply",
        format!("{what}: {}", shape(reply)),
    )))
}

/// What kind of value `reply` is, without what it holds.
fn shape(reply: &Value) -> String {
    match reply {
        Value::Nil => "nil".to_owned(),
        Value::Int(_) => "an integer".to_owned(),
        Value::BulkString(b) => format!("a bulk string of {} bytes", b.len()),
        Value::SimpleString(s) => format!("a simple string of {} bytes", s.len()),
        Value::Okay => "OK".to_owned(),
        Value::Array(items) => format!(
            "an array of [{}]",
            items.iter().map(shape).collect::<Vec<_>>().join(", ")
        ),
        Value::ServerError(e) => format!("a server error ({:?})", e.kind()),
        _ => "another type".to_owned(),
    }
}

pub(crate) fn int_reply(reply: &Value, what: &str) -> Result<i64, Error> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected(what, other)),
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// [`text`], with bytes that are not UTF-8 replaced: a key's value as an
/// operator's view reads it (an application's binary value is no hold,
/// and a hold's metadata is shown as far as it can be).
fn lossy(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        other => text(other),
    }
}

/// A bulk string is the fencing token of a grant; an array of an integer
/// (the PTTL of the busy key, negative: no TTL) and the fencing counter is a
/// refusal, and with a third element, 1, one by a lock-delay (the integer is
/// then the ms it has left). With the counter (0 for a grant).
pub(crate) fn parse_acquire(reply: &Value) -> Result<(Grant, u64), Error> {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(pttl), Value::Int(counter)] => Ok((
                Grant::Busy(u64::try_from(*pttl).ok().map(Duration::from_millis)),
                u64::try_from(*counter).unwrap_or(0),
            )),
            // A lock-delay: the ms it has left.
            [Value::Int(left), Value::Int(counter), Value::Int(1)] => Ok((
                Grant::Delayed(Duration::from_millis(u64::try_from(*left).unwrap_or(0))),
                u64::try_from(*counter).unwrap_or(0),
            )),
            _ => Err(unexpected("acquire", reply)),
        },
        other => match text(other).and_then(|s| s.parse::<u64>().ok()) {
            Some(fence) => Ok((Grant::Granted(fence), 0)),
            None => Err(unexpected("acquire", reply)),
        },
    }
}

/// [`parse_acquire`], where a grant of a semaphore's permit is
/// `<fencing token>:<index of the permit>`; with that index.
pub(crate) fn parse_permit_acquire(reply: &Value) -> Result<(Grant, u64, Option<usize>), Error> {
    let granted = text(reply);
    if let Some((fence, slot)) = granted.as_deref().and_then(|s| s.split_once(':')) {
        return match (fence.parse::<u64>(), slot.parse::<usize>()) {
            (Ok(fence), Ok(slot)) => Ok((Grant::Granted(fence), 0, Some(slot))),
            _ => Err(unexpected("acquire", reply)),
        };
    }
    let (grant, floor) = parse_acquire(reply)?;
    Ok((grant, floor, None))
}

/// The number of keys deleted; after a hand-over, an array of that number,
/// the grantee's owner token and its fencing token.
pub(crate) fn parse_release(reply: &Value) -> Result<(i64, Option<Handed>), Error> {
    match reply {
        Value::Int(n) => Ok((*n, None)),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(n), token, fence] => {
                let token = text(token).ok_or_else(|| unexpected("release", reply))?;
                let fence = text(fence)
                    .and_then(|f| f.parse::<u64>().ok())
                    .ok_or_else(|| unexpected("release", reply))?;
                Ok((*n, Some((token, fence))))
            }
            _ => Err(unexpected("release", reply)),
        },
        other => Err(unexpected("release", other)),
    }
}

/// The hold whose key holds `value` with `pttl` left, with `waiters`,
/// named as a lock with no name yet (see [`named`]). A key redmutex did not
/// write is no hold, and has fencing token 0 here (with no metadata and no
/// time left), for the caller to refuse or skip: a value that is not
/// `<token>:<fence>:<metadata>` (another type, an application's string),
/// or one without an expiry (redmutex writes every hold with one).
fn held(value: &Value, pttl: i64, waiters: Vec<String>) -> Option<LockInfo> {
    let value = lossy(value)?;
    let ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
    let (fencing_token, metadata, ttl) = match (LockValue::parse(&value), ttl) {
        (Some(v), Some(ttl)) => (v.fence, v.metadata, ttl),
        _ => (0, "", Duration::ZERO),
    };
    Some(LockInfo {
        metadata: metadata.to_owned(),
        fencing_token,
        ttl,
        waiters,
        ..LockInfo::blank()
    })
}

/// `info` named as the hold `named` (a read-write lock's waiters lose the
/// `r` or `w` their entries lead with).
pub(crate) fn named(mut info: LockInfo, named: &Named) -> LockInfo {
    info.key = named.caller_key();
    info.name = named.name().to_owned();
    info.kind = match named {
        Named::Lock(_) => LockKind::Lock,
        Named::Permit { .. } => LockKind::Permit,
        Named::Read { .. } => LockKind::Read,
        Named::Write(_) => LockKind::Write,
        Named::Leader(_) => LockKind::Leader,
    };
    if matches!(info.kind, LockKind::Read | LockKind::Write) {
        for w in &mut info.waiters {
            if w.starts_with(['r', 'w']) {
                w.remove(0);
            }
        }
    }
    info
}

/// `info` as the hold `target` is at `place` (from 1) of the prefixes it
/// may be under (see `lua/lib/whose.lua`): named there, with that prefix,
/// and the name its asker gives it.
fn placed(info: LockInfo, target: &Target, place: &Value) -> Option<LockInfo> {
    let Value::Int(place) = place else {
        return None;
    };
    let at = usize::try_from(*place).ok()?.checked_sub(1)?;
    let (space, hold) = target.under.get(at)?;
    let mut info = named(info, hold);
    info.own_key = std::mem::replace(&mut info.key, target.caller.clone());
    info.prefix = space.prefix().map(str::to_owned);
    Some(info)
}

/// `[value, pttl, waiters, place]`, or an empty array for a missing key
/// (see `lua/inspect.lua`).
pub(crate) fn parse_inspect(reply: &Value, target: &Target) -> Result<Option<LockInfo>, Error> {
    let Value::Array(items) = reply else {
        return Err(unexpected("inspect", reply));
    };
    match items.as_slice() {
        [] => Ok(None),
        [value, Value::Int(pttl), waiting, place] => {
            let waiters = waiter_list(waiting).ok_or_else(|| unexpected("inspect", reply))?;
            let info = held(value, *pttl, waiters)
                .and_then(|info| placed(info, target, place))
                .ok_or_else(|| unexpected("inspect", reply))?;
            Ok(Some(info))
        }
        _ => Err(unexpected("inspect", reply)),
    }
}

/// The waiters' metadata a listing or a break read (see
/// `lua/lib/waiting.lua`): an array of strings.
fn waiter_list(waiting: &Value) -> Option<Vec<String>> {
    let Value::Array(waiting) = waiting else {
        return None;
    };
    Some(
        waiting
            .iter()
            .map(|w| text(w).unwrap_or_default())
            .collect(),
    )
}

/// What a break found (see `lua/break.lua`).
#[derive(Debug)]
pub(crate) enum Broke {
    /// The key is missing.
    Free,
    /// A key redmutex did not write: left alone.
    Foreign,
    /// A hold that none of the prefixes it may be under has granted:
    /// left alone.
    Untold,
    /// A hold of a prefix outside those it may be broken under (an outer
    /// one, or none), as it is there: left alone.
    Outside(Box<LockInfo>),
    /// The hold as it was, under its own prefix, and the hand-over, if
    /// there was one.
    Broken(Box<LockInfo>, Option<Handed>),
}

/// The reply of `lua/break.lua`.
pub(crate) fn parse_break(reply: &Value, target: &Target) -> Result<Broke, Error> {
    let Value::Array(items) = reply else {
        return Err(unexpected("break", reply));
    };
    let (value, pttl, waiting, place, handed) = match items.as_slice() {
        [] => return Ok(Broke::Free),
        [_, Value::Int(_)] => return Ok(Broke::Foreign),
        [_, Value::Int(_), _, Value::Int(0)] => return Ok(Broke::Untold),
        [value, Value::Int(pttl), waiting, Value::Int(place)] if *place < 0 => {
            let info = waiter_list(waiting)
                .and_then(|waiters| held(value, *pttl, waiters))
                .and_then(|info| placed(info, target, &Value::Int(-*place)))
                .ok_or_else(|| unexpected("break", reply))?;
            return Ok(Broke::Outside(Box::new(info)));
        }
        [value, Value::Int(pttl), waiting, place] => (value, *pttl, waiting, place, None),
        [value, Value::Int(pttl), waiting, place, to, fence] => {
            let to = text(to).ok_or_else(|| unexpected("break", reply))?;
            let fence = text(fence)
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| unexpected("break", reply))?;
            (value, *pttl, waiting, place, Some((to, fence)))
        }
        _ => return Err(unexpected("break", reply)),
    };
    let waiters = waiter_list(waiting).ok_or_else(|| unexpected("break", reply))?;
    let info = held(value, pttl, waiters)
        .and_then(|info| placed(info, target, place))
        .ok_or_else(|| unexpected("break", reply))?;
    Ok(Broke::Broken(Box::new(info), handed))
}

/// A renewal's reply (`lua/renew.lua`): `(true, None)` renewed, `(false,
/// None)` lost, `(false, Some(reason))` broken by an operator.
pub(crate) fn parse_renew(reply: &Value) -> Result<(bool, Option<String>), Error> {
    match reply {
        Value::Int(1) => Ok((true, None)),
        Value::Int(0) => Ok((false, None)),
        other => match text(other) {
            Some(reason) => Ok((false, Some(reason))),
            None => Err(unexpected("renew", other)),
        },
    }
}

/// `rw_downgrade.lua`'s reply: `Ok(fence)`, the read hold's fencing
/// token, when the write hold was ours; else `Err` with the reason an
/// operator gave when one broke it.
pub(crate) fn parse_downgrade(reply: &Value) -> Result<Result<u64, Option<String>>, Error> {
    let Value::Array(items) = reply else {
        return parse_renew(reply).map(|(_, why)| Err(why));
    };
    let fence = items.first().filter(|_| items.len() == 1).and_then(text);
    let fence = fence.and_then(|f| f.parse::<u64>().ok());
    fence.map(Ok).ok_or_else(|| unexpected("downgrade", reply))
}

/// A holder's mark in the marks of broken holds (`HGET`'s reply, see
/// `lua/lib/marks.lua`): `<until ms>:<reason>` gives the reason; a missing
/// or unreadable one, `None`.
pub(crate) fn parse_mark(reply: &Value) -> Option<String> {
    let mark = text(reply)?;
    let (until, reason) = mark.split_once(':')?;
    (until.bytes().all(|b| b.is_ascii_digit()) && !reason.is_empty()).then(|| reason.to_owned())
}

/// A `SCAN` step: the next cursor and the keys (see `lua/scan.lua`).
pub(crate) fn parse_scan(reply: &Value) -> Result<(u64, Vec<String>), Error> {
    let Value::Array(items) = reply else {
        return Err(unexpected("scan", reply));
    };
    match items.as_slice() {
        [cursor, Value::Array(keys)] => {
            let cursor = text(cursor)
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| unexpected("scan", reply))?;
            Ok((cursor, keys.iter().filter_map(text).collect()))
        }
        _ => Err(unexpected("scan", reply)),
    }
}

/// What an observer reads of an election at once (see `lua/observe.lua`).
pub(crate) struct Observed {
    /// The log's entries after the one asked for, with their ids.
    pub(crate) entries: Vec<(String, Logged)>,
    /// The id of the log's latest entry.
    pub(crate) latest: String,
    /// The leader now.
    pub(crate) leader: Option<Leader>,
    /// The entry asked for is gone: changes may have been trimmed.
    pub(crate) behind: bool,
}

/// One change in an election's log.
pub(crate) enum Logged {
    /// A new leader, or a new value (its TTL zero: the entry is past).
    Leader(Leader),
    /// No leader, after the leadership of this term ended (0: unknown).
    Ended(u64),
    /// The leader resigned and handed the lead to a queued candidate, who
    /// logs itself when it takes it up.
    Handed,
}

/// The observe script's reply (see `lua/observe.lua`).
pub(crate) fn parse_observe(reply: &Value) -> Result<Observed, Error> {
    let bad = || unexpected("observe", reply);
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    let [Value::Array(flat), latest, value, Value::Int(pttl), Value::Int(behind)] =
        items.as_slice()
    else {
        return Err(bad());
    };
    let mut entries = Vec::with_capacity(flat.len() / 3);
    for entry in flat.chunks(3) {
        let [id, term, value] = entry else {
            return Err(bad());
        };
        let (id, term, value) = (text(id), text(term), text(value));
        let (Some(id), Some(term), Some(value)) = (id, term, value) else {
            return Err(bad());
        };
        let change = match term.as_str() {
            "" => Logged::Ended(value.parse().unwrap_or(0)),
            ">" => Logged::Handed,
            t => Logged::Leader(Leader {
                value,
                term: t.parse().map_err(|_| bad())?,
                ttl: Duration::ZERO,
            }),
        };
        entries.push((id, change));
    }
    let latest = text(latest).ok_or_else(bad)?;
    let value = text(value).ok_or_else(bad)?;
    let leader = LockValue::parse(&value).map(|v| Leader {
        value: v.metadata.to_owned(),
        term: v.fence,
        ttl: u64::try_from(*pttl).map_or(Duration::MAX, Duration::from_millis),
    });
    Ok(Observed {
        entries,
        latest,
        leader,
        behind: *behind == 1,
    })
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies() {
        let granted = parse_acquire(&Value::BulkString(b"1763712345000001".to_vec())).unwrap();
        assert!(matches!(
            granted,
            (Grant::Granted(1_763_712_345_000_001), 0)
        ));
        let busy = |pttl, counter| Value::Array(vec![Value::Int(pttl), Value::Int(counter)]);
        assert!(matches!(
            parse_acquire(&busy(250, 9)).unwrap(),
            (Grant::Busy(Some(d)), 9) if d == Duration::from_millis(250)
        ));
        assert!(matches!(
            parse_acquire(&busy(-1, 0)).unwrap(),
            (Grant::Busy(None), 0)
        ));
        assert!(parse_acquire(&Value::Nil).is_err());
        assert!(parse_acquire(&Value::Int(3)).is_err());
        assert!(parse_acquire(&Value::BulkString(b"x".to_vec())).is_err());
    }

    #[test]
    fn release_replies() {
        assert_eq!(parse_release(&Value::Int(1)).unwrap(), (1, None));
        let handed = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"abc".to_vec()),
            Value::BulkString(b"42".to_vec()),
        ]);
        assert_eq!(
            parse_release(&handed).unwrap(),
            (1, Some(("abc".to_owned(), 42)))
        );
        assert!(parse_release(&Value::Nil).is_err());
    }

    #[test]
    fn errors_from_replies_never_show_a_token() {
        let token = "0123456789abcdef0123456789abcdef";
        let replies = [
            Value::Array(vec![
                Value::Int(1),
                Value::BulkString(token.as_bytes().to_vec()),
                Value::BulkString(b"not a number".to_vec()),
            ]),
            Value::BulkString(format!("{token}:1:m").into_bytes()),
            Value::SimpleString(token.to_owned()),
            Value::Array(vec![Value::BulkString(token.as_bytes().to_vec())]),
        ];
        for reply in &replies {
            for e in [
                parse_release(reply).err(),
                parse_acquire(reply).err(),
                parse_inspect(reply, &lock_k()).err(),
                int_reply(reply, "renew").err(),
            ]
            .into_iter()
            .flatten()
            {
                let text = format!("{e} {e:?} {:?}", std::error::Error::source(&e));
                assert!(!text.contains(token), "{text}");
                assert!(!text.contains("0123456789abcdef"), "{text}");
            }
        }
    }

    /// The lock `k` of no prefix, as a reading looks for it.
    fn lock_k() -> Target {
        crate::protocol::keys::KeySpace::new(None)
            .target("k", false)
            .unwrap()
    }

    #[test]
    fn inspect_replies() {
        let lock = lock_k();
        assert_eq!(parse_inspect(&Value::Array(vec![]), &lock).unwrap(), None);
        let token = "0123456789abcdef0123456789abcdef";
        let info = parse_inspect(
            &Value::Array(vec![
                Value::BulkString(format!("{token}:42:host:1").into_bytes()),
                Value::Int(1500),
                Value::Array(vec![Value::BulkString(b"next:2".to_vec())]),
                Value::Int(1),
            ]),
            &lock,
        )
        .unwrap()
        .unwrap();
        assert_eq!(info.metadata(), "host:1");
        assert_eq!(info.fencing_token(), 42);
        assert_eq!(info.ttl(), Duration::from_millis(1500));
        assert_eq!(
            (info.key(), info.waiters()),
            ("k", &["next:2".to_owned()][..])
        );
        // No hold: another value, or one without an expiry (token 0, for
        // the caller to refuse or skip).
        let lookalike = format!("{token}:42:host:1");
        let foreign = [
            ("", 1500),
            ("not a lock", 1500),
            ("short:1:m", -1),
            (&format!("{token}:x:m"), 1500),
            (&lookalike, -1),
        ];
        for (value, pttl) in foreign {
            let info = parse_inspect(
                &Value::Array(vec![
                    Value::BulkString(value.as_bytes().to_vec()),
                    Value::Int(pttl),
                    Value::Array(vec![]),
                    Value::Int(1),
                ]),
                &lock,
            )
            .unwrap()
            .unwrap();
            assert_eq!(
                (info.metadata(), info.fencing_token(), info.ttl()),
                ("", 0, Duration::ZERO),
                "{value}"
            );
        }
        assert!(parse_inspect(&Value::Int(3), &lock).is_err());
    }

    #[test]
    fn marks_give_the_reason_of_a_break() {
        let mark = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            parse_mark(&mark("1795671813351:stuck: since 3")).as_deref(),
            Some("stuck: since 3")
        );
        assert_eq!(parse_mark(&Value::Nil), None);
        assert_eq!(parse_mark(&mark("1795671813351:")), None);
        assert_eq!(parse_mark(&mark("x:reason")), None);
    }
}
