//! Owner tokens: 128 random bits per acquisition, as 32 hex digits.

use std::fmt::{self, Write};

use crate::Error;

/// Identifies one acquisition in Redis. Never printed: `Debug` hides it, since
/// anyone who knows it can release or extend the lock.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(String);

impl Token {
    /// A fresh token from the operating system's random source.
    pub(crate) fn new() -> Result<Self, Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(Error::Random)?;
        let hex = bytes.iter().fold(String::with_capacity(32), |mut s, b| {
            // `{:02x}` of a byte is always two hex digits.
            let _ = write!(s, "{b:02x}");
            s
        });
        Ok(Token(hex))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
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

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = Token::new().unwrap();
        let b = Token::new().unwrap();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn debug_hides_the_token() {
        let t = Token::new().unwrap();
        assert!(!format!("{t:?}").contains(t.as_str()));
    }
}
