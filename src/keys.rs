//! Every Redis key name the crate uses is built here and nowhere else.
//!
//! - A lock on `key` lives at `<prefix>:<key>`, or at `key` itself without a
//!   prefix. It is a hash with the fields `owner` (the owner token), `fence`
//!   (the fencing token) and `meta` (the locker's metadata), and a TTL.
//! - The fencing counter of a prefix lives at `<prefix>:__redmutex__:fence`,
//!   or `__redmutex__:fence` without a prefix: one key per prefix, whatever the
//!   number of lock names, so nothing grows with the names used.
//!
//! Keys starting with [`RESERVED`] are refused, so no lock can land on the
//! counter.

use crate::Error;

/// The namespace the crate keeps for its own keys.
pub(crate) const RESERVED: &str = "__redmutex__";

/// Maps caller keys to Redis keys for one prefix.
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    prefix: Option<String>,
}

impl KeySpace {
    /// A key space for `prefix` (`None`: keys are used as given).
    pub(crate) fn new(prefix: Option<String>) -> Self {
        KeySpace { prefix }
    }

    /// The Redis key of the lock on `key`.
    pub(crate) fn lock_key(&self, key: &str) -> String {
        self.qualify(key)
    }

    /// The Redis key of this prefix's fencing counter.
    pub(crate) fn fence_key(&self) -> String {
        self.qualify(&format!("{RESERVED}:fence"))
    }

    fn qualify(&self, name: &str) -> String {
        match &self.prefix {
            Some(p) => format!("{p}:{name}"),
            None => name.to_owned(),
        }
    }
}

/// Checks one caller key: not empty, not in the reserved namespace.
pub(crate) fn validate_key(key: &str) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::InvalidInput("lock key must not be empty".into()));
    }
    if key.starts_with(RESERVED) {
        return Err(Error::InvalidInput(format!(
            "lock key {key:?} uses the reserved prefix {RESERVED:?}"
        )));
    }
    Ok(())
}

/// Checks a multi-key list: at least one key, each valid, no duplicates.
pub(crate) fn validate_keys(keys: &[&str]) -> Result<(), Error> {
    if keys.is_empty() {
        return Err(Error::InvalidInput("key list must not be empty".into()));
    }
    for (i, key) in keys.iter().enumerate() {
        validate_key(key)?;
        if keys.iter().take(i).any(|earlier| earlier == key) {
            return Err(Error::InvalidInput(format!("key {key:?} appears twice")));
        }
    }
    Ok(())
}

/// Checks a prefix given to the builder.
pub(crate) fn validate_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.is_empty() {
        return Err(Error::InvalidInput(
            "prefix must not be empty (leave it unset for no prefix)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixed_and_bare_names() {
        let p = KeySpace::new(Some("jobs".into()));
        assert_eq!(p.lock_key("report"), "jobs:report");
        assert_eq!(p.fence_key(), "jobs:__redmutex__:fence");
        let bare = KeySpace::new(None);
        assert_eq!(bare.lock_key("report"), "report");
        assert_eq!(bare.fence_key(), "__redmutex__:fence");
    }

    #[test]
    fn no_lock_key_can_be_the_counter() {
        for space in [KeySpace::new(None), KeySpace::new(Some("p".into()))] {
            let counter = space.fence_key();
            let as_caller_key = counter.strip_prefix("p:").unwrap_or(&counter);
            assert!(validate_key(as_caller_key).is_err());
        }
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(validate_key("").is_err());
        assert!(validate_key("__redmutex__:x").is_err());
        assert!(validate_key("ok").is_ok());
        assert!(validate_keys(&[]).is_err());
        assert!(validate_keys(&["a", "b", "a"]).is_err());
        assert!(validate_keys(&["a", ""]).is_err());
        assert!(validate_keys(&["a", "b"]).is_ok());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("jobs").is_ok());
    }
}
