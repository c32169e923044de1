//! The announcements on a release channel, published by the release and
//! dequeue scripts (see `protocol/lua/lib/give.lua`), and what they wake:
//!
//! - `-<key>`: the lock at Redis key `<key>` was freed, nobody queued;
//! - `+<token>:<fence>:<key>`: it was handed over to the waiter whose
//!   owner token is `<token>`, with fencing token `<fence>`.

use redis::{PushKind, Value};

use crate::wake::waiters::Signal;

/// Wakes the waiters in `waiters` that an announcement is for.
pub(super) fn deliver(waiters: &Signal, message: &[u8]) {
    match parse_announcement(message) {
        Some(Announced::Released(key)) => waiters.notify(key),
        Some(Announced::Handed { token, fence }) => waiters.hand_over(token, fence),
        None => {}
    }
}

/// What a subscribed connection read, as `[kind, channel, ...]` (a RESP2
/// reply's form: `["smessage", channel, message]`, `["subscribe", channel,
/// count]`), whether it came as a reply or as a RESP3 push
/// (`protocol=resp3`), whose kind is apart; `None` for anything else.
pub(super) fn parts(v: Value) -> Option<Vec<Value>> {
    let kind: &[u8] = match v {
        Value::Array(parts) => return Some(parts),
        Value::Push { ref kind, .. } => match kind {
            PushKind::Message => b"message",
            PushKind::Subscribe => b"subscribe",
            PushKind::Unsubscribe => b"unsubscribe",
            PushKind::SMessage => b"smessage",
            PushKind::SSubscribe => b"ssubscribe",
            PushKind::SUnsubscribe => b"sunsubscribe",
            _ => return None,
        },
        _ => return None,
    };
    let Value::Push { mut data, .. } = v else {
        return None;
    };
    data.insert(0, Value::BulkString(kind.to_vec()));
    Some(data)
}

/// What a release channel message says.
#[derive(Debug, PartialEq, Eq)]
enum Announced<'a> {
    /// `-<key>`: the lock was freed.
    Released(&'a str),
    /// `+<token>:<fence>:<key>`: the lock was handed over to a waiter (the
    /// waiter is known by its token).
    Handed { token: &'a str, fence: u64 },
}

fn parse_announcement(message: &[u8]) -> Option<Announced<'_>> {
    let message = std::str::from_utf8(message).ok()?;
    if let Some(key) = message.strip_prefix('-') {
        return Some(Announced::Released(key));
    }
    let mut parts = message.strip_prefix('+')?.splitn(3, ':');
    let token = parts.next()?;
    let fence = parts.next()?.parse().ok()?;
    parts.next().filter(|key| !key.is_empty())?;
    Some(Announced::Handed { token, fence })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_and_a_push_read_alike() {
        let word = |w: &str| Value::BulkString(w.as_bytes().to_vec());
        let resp2 = vec![word("smessage"), word("chan"), word("-k")];
        let resp3 = Value::Push {
            kind: PushKind::SMessage,
            data: vec![word("chan"), word("-k")],
        };
        assert_eq!(parts(Value::Array(resp2.clone())), Some(resp2.clone()));
        assert_eq!(parts(resp3), Some(resp2));
        let confirmed = Value::Push {
            kind: PushKind::Subscribe,
            data: vec![word("chan"), Value::Int(1)],
        };
        assert_eq!(
            parts(confirmed),
            Some(vec![word("subscribe"), word("chan"), Value::Int(1)])
        );
        let other = Value::Push {
            kind: PushKind::Invalidate,
            data: vec![],
        };
        assert_eq!(parts(other), None);
        assert_eq!(parts(word("PONG")), None);
    }

    #[test]
    fn announcements() {
        assert_eq!(
            parse_announcement(b"-p:k"),
            Some(Announced::Released("p:k"))
        );
        assert_eq!(
            parse_announcement(b"+abc:42:p:k"),
            Some(Announced::Handed {
                token: "abc",
                fence: 42
            })
        );
        for bad in [&b"p:k"[..], b"+abc:x:k", b"+abc:1:", b"+abc", b"\xff"] {
            assert_eq!(parse_announcement(bad), None);
        }
    }
}
