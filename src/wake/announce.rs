//! The announcements on a release channel, published by the release and
//! dequeue scripts (see `protocol/lua/lib/give.lua`), and what they wake:
//!
//! - `-<key>`: the lock at Redis key `<key>` was freed, nobody queued;
//! - `+<token>:<fence>:<key>`: it was handed over to the waiter whose
//!   owner token is `<token>`, with fencing token `<fence>`.

use crate::wake::waiters::Signal;

/// Wakes the waiters in `waiters` that an announcement is for.
pub(super) fn deliver(waiters: &Signal, message: &[u8]) {
    match parse_announcement(message) {
        Some(Announced::Released(key)) => waiters.notify(key),
        Some(Announced::Handed { token, fence }) => waiters.hand_over(token, fence),
        None => {}
    }
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
