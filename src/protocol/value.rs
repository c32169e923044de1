//! The lock's value as it is stored in Redis ([`LockValue`]), built and
//! parsed in one place.

/// A lock's value in Redis: `<token>:<fence>:<metadata>`, the owner token
/// (32 hex digits), the fencing token of the grant, and the holder's
/// metadata. Built here and parsed here; the scripts build it too (see
/// `ACQUIRE` in `scripts.rs`). Its `Debug` leaves the owner token out.
pub(crate) struct LockValue<'a> {
    pub(crate) token: &'a str,
    pub(crate) fence: u64,
    pub(crate) metadata: &'a str,
}

impl<'a> LockValue<'a> {
    /// The value as stored.
    pub(crate) fn format(&self) -> String {
        format!("{}:{}:{}", self.token, self.fence, self.metadata)
    }

    /// Parses a stored value; `None` for anything that is not one of ours:
    /// the fencing token as the scripts mint it and `lua/break.lua` reads
    /// it (digits, no leading zero, at most 2^63 - 1, INCR's limit).
    pub(crate) fn parse(value: &'a str) -> Option<Self> {
        let mut parts = value.splitn(3, ':');
        let token = parts.next()?;
        let fence = parts.next()?;
        if !fence.bytes().all(|b| b.is_ascii_digit()) || fence.starts_with('0') {
            return None;
        }
        let fence = u64::try_from(fence.parse::<i64>().ok()?).ok()?;
        let metadata = parts.next()?;
        (token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit())).then_some(LockValue {
            token,
            fence,
            metadata,
        })
    }
}

impl std::fmt::Debug for LockValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockValue")
            .field("fence", &self.fence)
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_values_round_trip_and_hide_the_token() {
        let token = "0123456789abcdef0123456789abcdef";
        let value = LockValue {
            token,
            fence: 7,
            metadata: "host:1",
        };
        let stored = value.format();
        assert_eq!(stored, format!("{token}:7:host:1"));
        let parsed = LockValue::parse(&stored).unwrap();
        assert_eq!(
            (parsed.token, parsed.fence, parsed.metadata),
            (token, 7, "host:1")
        );
        assert!(!format!("{parsed:?}").contains(token));
        assert!(LockValue::parse("short:1:m").is_none());
        // Fencing tokens no grant has: left to the caller to refuse.
        for fence in ["0", "05", "+5", "", "9223372036854775808"] {
            let stored = format!("{}:{fence}:m", "ab".repeat(16));
            assert!(LockValue::parse(&stored).is_none(), "{fence}");
        }
        let top = format!("{}:9223372036854775807:m", "ab".repeat(16));
        assert_eq!(
            LockValue::parse(&top).map(|v| v.fence),
            Some(i64::MAX as u64)
        );
    }
}
