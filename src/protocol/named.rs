//! The holds a listing names, and the names it gives them (see [`Named`]):
//! which hold a Redis key is, and the keys of a hold (built by `keys.rs`).

use crate::protocol::keys::{validate_key, KeySpace, LockKeys, RESERVED};
use crate::Error;
/// A hold as a listing names it to the caller (`LockInfo::key`): a lock by
/// its key; a permit, a read hold, the writer of a read-write lock and an
/// election's leader by the name of their key without the prefix (and
/// without a cluster's tag), `__redmutex__:permit:<i>:<name>`,
/// `__redmutex__:rw-read:<id>:<name>`, `__redmutex__:rw-write:<name>`,
/// `__redmutex__:election:<name>`, which no lock key can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Named {
    Lock(String),
    Permit { index: u32, name: String },
    Read { id: String, name: String },
    Write(String),
    Leader(String),
}

impl Named {
    /// The hold a caller names by `key` (as a listing gives it).
    pub(crate) fn parse(key: &str) -> Result<Named, Error> {
        let refused = || {
            Error::InvalidInput(format!(
                "{key:?} names no hold: a lock key, or a permit's, a read-write lock's or \
                 an election leader's name as a listing gives it"
            ))
        };
        match key.strip_prefix(RESERVED).and_then(|r| r.strip_prefix(':')) {
            Some(rest) => {
                let (kind, body) = rest.split_once(':').ok_or_else(refused)?;
                Named::internal(kind, body).ok_or_else(refused)
            }
            None => {
                validate_key(key)?;
                Ok(Named::Lock(key.to_owned()))
            }
        }
    }

    /// A hold's key of kind `kind` (`permit`, `rw-read`, `rw-write`,
    /// `election`) with `body` after the kind (and tag).
    pub(crate) fn internal(kind: &str, body: &str) -> Option<Named> {
        let valid = |name: &str| validate_key(name).is_ok().then(|| name.to_owned());
        match kind {
            "permit" => {
                let (index, name) = body.split_once(':')?;
                Some(Named::Permit {
                    index: index.parse().ok()?,
                    name: valid(name)?,
                })
            }
            "rw-read" => {
                let (id, name) = body.split_once(':')?;
                (!id.is_empty()).then_some(())?;
                Some(Named::Read {
                    id: id.to_owned(),
                    name: valid(name)?,
                })
            }
            "rw-write" => Some(Named::Write(valid(body)?)),
            "election" => Some(Named::Leader(valid(body)?)),
            _ => None,
        }
    }

    /// The name a listing gives this hold (see the type's docs).
    pub(crate) fn caller_key(&self) -> String {
        match self {
            Named::Lock(key) => key.clone(),
            Named::Permit { index, name } => format!("{RESERVED}:permit:{index}:{name}"),
            Named::Read { id, name } => format!("{RESERVED}:rw-read:{id}:{name}"),
            Named::Write(name) => format!("{RESERVED}:rw-write:{name}"),
            Named::Leader(name) => format!("{RESERVED}:election:{name}"),
        }
    }

    /// The lock's key, or the semaphore's, read-write lock's or election's
    /// name.
    pub(crate) fn name(&self) -> &str {
        match self {
            Named::Lock(name) | Named::Write(name) | Named::Leader(name) => name,
            Named::Permit { name, .. } | Named::Read { name, .. } => name,
        }
    }
}

impl KeySpace {
    /// Which hold the Redis key `redis_key` of this prefix is, if it is
    /// one: a lock key, a permit, a read hold, a writer key or an
    /// election's leader; `None` for an internal key (a counter, a queue,
    /// waiters, marks, the audit stream, an election's log) or another
    /// prefix's key.
    pub(crate) fn named(&self, redis_key: &str, cluster: bool) -> Option<Named> {
        if let Some(rest) = redis_key.strip_prefix(self.reserved()) {
            let (kind, body) = rest.split_once(':')?;
            let body = if cluster {
                let (tag, body) = body.split_once("}:")?;
                tag.starts_with('{').then_some(body)?
            } else {
                body
            };
            return Named::internal(kind, body);
        }
        if redis_key.contains(RESERVED) {
            return None;
        }
        match self.prefix() {
            Some(p) => redis_key
                .strip_prefix(p)
                .and_then(|r| r.strip_prefix(':'))
                .map(|k| Named::Lock(k.to_owned())),
            None => Some(Named::Lock(redis_key.to_owned())),
        }
    }

    /// The keys of the hold `named`: its own key as the only lock key, and
    /// those of its lock, semaphore or read-write lock.
    pub(crate) fn hold_keys(&self, named: &Named, cluster: bool) -> LockKeys {
        match named {
            Named::Lock(key) => self.lock_keys(&[key], cluster),
            Named::Permit { index, name } => self.one_permit_keys(name, *index, cluster),
            Named::Read { id, name } => self.rw_keys(name, Some(id), cluster),
            Named::Write(name) => self.rw_keys(name, None, cluster),
            Named::Leader(name) => self.election_keys(name, cluster),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_are_named_back_from_their_keys_and_internal_keys_are_not() {
        for cluster in [false, true] {
            for prefix in [None, Some("p")] {
                let space = KeySpace::new(prefix.map(str::to_owned));
                let holds = [
                    Named::Lock("report".into()),
                    Named::Permit {
                        index: 3,
                        name: "exports".into(),
                    },
                    Named::Read {
                        id: "ab12".into(),
                        name: "cfg:x".into(),
                    },
                    Named::Write("cfg:x".into()),
                    Named::Leader("primary".into()),
                ];
                for hold in holds {
                    let keys = space.hold_keys(&hold, cluster);
                    let own = keys.locks.first().unwrap();
                    assert_eq!(space.named(own, cluster), Some(hold.clone()), "{own}");
                    assert_eq!(Named::parse(&hold.caller_key()).unwrap(), hold);
                    for internal in [&keys.fence, &keys.marks, &keys.queue, &keys.waiters] {
                        assert_eq!(space.named(internal, cluster), None, "{internal}");
                    }
                }
                assert_eq!(space.named(&space.audit_key(), cluster), None);
            }
        }
        // Any permit index costs one key (not one per permit below it).
        let space = KeySpace::new(Some("p".into()));
        let huge = Named::parse("__redmutex__:permit:4294967295:x").unwrap();
        let keys = space.hold_keys(&huge, false);
        assert_eq!(&*keys.locks, ["p:__redmutex__:permit:4294967295:x"]);
        assert!(Named::parse("__redmutex__:fence").is_err());
        assert!(Named::parse("").is_err());
        let space = KeySpace::new(Some("a*b".into()));
        assert_eq!(space.scan_pattern(), "a\\*b:*");
    }
}
