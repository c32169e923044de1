//! Owner tokens: 128 bits per acquisition, as 32 hex digits, unique and
//! unguessable without a system call per token.
//!
//! A process draws its secrets once from the operating system (and again
//! after a `fork`, so a child never repeats its parent's tokens): a 64-bit
//! prefix and a keyed hasher. Token number `n` of the process is
//! `prefix ^ n` followed by the keyed hash of `n`. The first half alone
//! makes tokens of one process distinct (one counter, one prefix) and those
//! of two processes distinct unless their random prefixes nearly collide;
//! the second half makes a token impossible to guess from earlier ones.
//! Reading 16 random bytes per lock instead cost a system call, a few
//! microseconds on a lock + unlock cycle of about a hundred.

use std::fmt;
use std::hash::{BuildHasher, RandomState};

use parking_lot::Mutex;

use crate::Error;

/// Identifies one acquisition in Redis. Never printed: `Debug` hides it, since
/// anyone who knows it can release or extend the lock.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(String);

/// The secrets of this process's tokens, and how many it has made.
struct Source {
    pid: u32,
    prefix: u64,
    /// SipHash with keys the standard library draws from the OS.
    hasher: RandomState,
    next: u64,
}

impl Source {
    fn seed(pid: u32) -> Result<Source, Error> {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(Error::Random)?;
        Ok(Source {
            pid,
            prefix: u64::from_le_bytes(bytes),
            hasher: RandomState::new(),
            next: 0,
        })
    }
}

static SOURCE: Mutex<Option<Source>> = Mutex::new(None);

impl Token {
    /// A fresh token, distinct from every other one this process made.
    pub(crate) fn new() -> Result<Self, Error> {
        let (unique, secret) = next(&mut SOURCE.lock(), std::process::id())?;
        let mut hex = String::with_capacity(32);
        push_hex(&mut hex, unique);
        push_hex(&mut hex, secret);
        Ok(Token(hex))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// A fresh id to name a key by (a read hold's): the first half of a
    /// token that is never used as one, so unique as tokens are, and
    /// telling nothing of any owner token's secret half.
    pub(crate) fn key_id() -> Result<String, Error> {
        let (unique, _) = next(&mut SOURCE.lock(), std::process::id())?;
        let mut hex = String::with_capacity(16);
        push_hex(&mut hex, unique);
        Ok(hex)
    }
}

/// The two halves of the next token of process `pid`, seeding `source`
/// first when it is empty or was seeded by another process (the parent of
/// a `fork`).
fn next(source: &mut Option<Source>, pid: u32) -> Result<(u64, u64), Error> {
    let source = match source {
        Some(s) if s.pid == pid => s,
        stale => stale.insert(Source::seed(pid)?),
    };
    let n = source.next;
    source.next = n.wrapping_add(1);
    Ok((source.prefix ^ n, source.hasher.hash_one(n)))
}

/// Appends `v` as 16 lower-case hex digits.
fn push_hex(s: &mut String, v: u64) {
    for shift in (0..16).rev() {
        let nibble = ((v >> (shift * 4)) & 0xf) as u8;
        s.push(char::from(if nibble < 10 {
            b'0' + nibble
        } else {
            b'a' + nibble - 10
        }));
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<hidden>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let tokens: Vec<Token> = (0..10_000).map(|_| Token::new().unwrap()).collect();
        for t in &tokens {
            assert_eq!(t.as_str().len(), 32);
            assert!(t
                .as_str()
                .bytes()
                .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        }
        let distinct: HashSet<&str> = tokens.iter().map(Token::as_str).collect();
        assert_eq!(distinct.len(), tokens.len());
        // The first halves of consecutive tokens differ in their low bits
        // only; the hashed halves differ throughout.
        assert_ne!(tokens[0].as_str()[16..], tokens[1].as_str()[16..]);
    }

    #[test]
    fn a_forked_child_draws_new_secrets() {
        let mut source = None;
        let first = next(&mut source, 1).unwrap();
        assert_ne!(first, next(&mut source, 1).unwrap());
        let parent_prefix = source.as_ref().map(|s| s.prefix).unwrap();
        // The parent's state seen from another pid, as in a forked child:
        // it must not go on with the parent's next token.
        let child = next(&mut source, 2).unwrap();
        let s = source.as_ref().unwrap();
        assert_eq!((s.pid, s.next), (2, 1), "reseeded, counting afresh");
        assert_ne!(s.prefix, parent_prefix, "with a prefix of its own");
        assert_ne!(child.0, parent_prefix ^ 2);
    }

    #[test]
    fn key_ids_are_16_hex_digits_distinct_from_token_halves() {
        let t = Token::new().unwrap();
        let id = Token::key_id().unwrap();
        assert_eq!(id.len(), 16);
        assert!(id.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(id, t.as_str()[..16]);
        assert_ne!(id, Token::key_id().unwrap());
    }

    #[test]
    fn hex_digits_are_in_order() {
        let mut s = String::new();
        push_hex(&mut s, 0x0123_4567_89ab_cdef);
        assert_eq!(s, "0123456789abcdef");
    }

    #[test]
    fn debug_hides_the_token() {
        let t = Token::new().unwrap();
        assert!(!format!("{t:?}").contains(t.as_str()));
    }
}
