//! The holds a listing names, and the names it gives them (see [`Named`]):
//! which hold a Redis key is, and the keys of a hold (built by `keys.rs`);
//! where an operator's call looks for a hold ([`Target`]): under the
//! prefix its key names, or each prefix a lock key may be under.

use crate::protocol::keys::{
    validate_cluster_prefix, validate_key, validate_prefix, KeySpace, LockKeys, RESERVED,
};
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

/// A hold as an operator's call looks for it: its name as the asking
/// locker gives it, and each prefix it may be under with its name there.
/// An internal key (a permit's, a read-write lock's hold, a leader's) names
/// its prefix: `<prefix>:__redmutex__:...`. A lock key does not: `a:b:c`
/// is lock `c` of prefix `a:b`, lock `b:c` of `a`, or `a:b:c` of none, and
/// the scripts tell which by the prefixes' fencing counters (see
/// `lua/lib/whose.lua`). A locker reads and breaks holds under its own
/// prefix and those nested in it (the keys an ACL of `~<prefix>:*` lets it
/// use), one without a prefix under every prefix; it also looks at the
/// outer prefixes (and none), where the key may be held too, so that a hold
/// of one of them is said to be there and left alone, and its holder told
/// of a break whichever of them it is under (where its ACL lets it: see
/// [`Target::within`]).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The name the asking locker gives it (`LockInfo::key`).
    pub(crate) caller: String,
    /// Each prefix it may be under with its name there, the longest first:
    /// the asking locker's own and those nested in it (its own last of
    /// them), then the outer ones and none; for an internal key, its own
    /// alone.
    pub(crate) under: Vec<(KeySpace, Named)>,
    /// How many of `under` (the first ones) are the asking locker's own
    /// prefix and those nested in it: where it reads and breaks holds. The
    /// rest are only looked at.
    pub(crate) scope: usize,
    /// Whether `under` holds the one prefix it can be under: an internal
    /// key's, or no prefix for a lock key that no prefix can hold. Else
    /// only a counter tells (a prefix outside the asking locker's may hold
    /// it too).
    pub(crate) known: bool,
}

impl Target {
    /// The target without the outer prefixes (those past `scope`), when it
    /// has any: for an asking locker whose ACL denies it their keys (a
    /// user of `~<prefix>:*`), which then reads and breaks the hold as its
    /// own prefix's, as it cannot see theirs.
    pub(crate) fn within(&self) -> Option<Target> {
        (self.scope < self.under.len()).then(|| Target {
            under: self.under.iter().take(self.scope).cloned().collect(),
            ..self.clone()
        })
    }

    /// Its keys under each prefix it may be under, in the order of `under`.
    pub(crate) fn keys(&self, cluster: bool) -> Vec<LockKeys> {
        self.under
            .iter()
            .map(|(space, named)| space.hold_keys(named, cluster))
            .collect()
    }

    /// The prefixes it may be under, as messages name them (`"jobs"`, or
    /// `no prefix`), the longest first.
    pub(crate) fn prefixes(&self) -> String {
        let named: Vec<String> = self
            .under
            .iter()
            .map(|(space, _)| match space.prefix() {
                Some(p) => format!("prefix {p:?}"),
                None => "no prefix".to_owned(),
            })
            .collect();
        named.join(", ")
    }
}

impl KeySpace {
    /// Where to look for the hold this prefix's locker names `name` (as its
    /// listing gives it): a lock key, or an internal hold's name, of this
    /// prefix (`__redmutex__:permit:0:x`) or of one nested in it
    /// (`team:__redmutex__:permit:0:x`, of `<prefix>:team`).
    pub(crate) fn target(&self, name: &str, cluster: bool) -> Result<Target, Error> {
        let refused = || {
            Error::InvalidInput(format!(
                "{name:?} names no hold: a lock key, or a permit's, a read-write lock's or \
                 an election leader's name as a listing gives it"
            ))
        };
        let Some(at) = name.find(RESERVED) else {
            validate_key(name)?;
            return Ok(self.lock_target(name.to_owned(), &self.lock_key(name), cluster));
        };
        let nested = match name.get(..at) {
            Some("") => None,
            Some(sub) => Some(sub.strip_suffix(':').ok_or_else(refused)?),
            None => return Err(refused()),
        };
        let rest = name
            .get(at + RESERVED.len()..)
            .and_then(|r| r.strip_prefix(':'))
            .ok_or_else(refused)?;
        let (kind, body) = rest.split_once(':').ok_or_else(refused)?;
        let named = Named::internal(kind, body).ok_or_else(refused)?;
        let space = match nested {
            None => self.clone(),
            Some(sub) => {
                let prefix = match self.prefix() {
                    Some(p) => format!("{p}:{sub}"),
                    None => sub.to_owned(),
                };
                validate_prefix(&prefix).map_err(|_| refused())?;
                if cluster {
                    validate_cluster_prefix(&prefix)?;
                }
                KeySpace::new(Some(prefix))
            }
        };
        Ok(Target {
            caller: name.to_owned(),
            under: vec![(space, named)],
            scope: 1,
            known: true,
        })
    }

    /// The hold a walk of this prefix's keys found at `redis_key`, if it
    /// is one: a lock key, or the key of a permit, a read hold, a writer or
    /// a leader of this prefix or of one nested in it; `None` for any
    /// other internal key (a counter, a queue, marks, a trail, a log).
    pub(crate) fn found(&self, redis_key: &str, cluster: bool) -> Option<Target> {
        let Some(at) = redis_key.find(RESERVED) else {
            let name = match self.prefix() {
                Some(p) => redis_key.strip_prefix(p)?.strip_prefix(':')?,
                None => redis_key,
            };
            validate_key(name).ok()?;
            return Some(self.lock_target(name.to_owned(), redis_key, cluster));
        };
        let own = match redis_key.get(..at)? {
            "" => None,
            before => Some(before.strip_suffix(':')?),
        };
        let space = KeySpace::new(own.map(str::to_owned));
        let named = space.named(redis_key, cluster)?;
        // Its name here: `<nested>:` before the name its own prefix gives it.
        let nested = match (self.prefix(), own) {
            (None, None) => None,
            (None, Some(own)) => Some(own),
            (Some(p), Some(own)) if own == p => None,
            (Some(p), Some(own)) => Some(own.strip_prefix(p)?.strip_prefix(':')?),
            (Some(_), None) => return None,
        };
        let caller = match nested {
            Some(sub) => format!("{sub}:{}", named.caller_key()),
            None => named.caller_key(),
        };
        Some(Target {
            caller,
            under: vec![(space, named)],
            scope: 1,
            known: true,
        })
    }

    /// The lock key `redis_key` (of this prefix), named `caller` here:
    /// under each prefix it may be under (each split at a `:` into a valid
    /// prefix and key, the longest prefix first, then none), this one and
    /// those nested in it in scope.
    fn lock_target(&self, caller: String, redis_key: &str, cluster: bool) -> Target {
        let mut under = Vec::new();
        let mut scope = 0;
        for (at, _) in redis_key.rmatch_indices(':') {
            let (prefix, key) = (redis_key.get(..at), redis_key.get(at + 1..));
            let (Some(prefix), Some(key)) = (prefix, key) else {
                continue;
            };
            let inside = match self.prefix() {
                Some(own) => prefix
                    .strip_prefix(own)
                    .is_some_and(|r| r.is_empty() || r.starts_with(':')),
                None => true,
            };
            let fits = validate_prefix(prefix).is_ok()
                && validate_key(key).is_ok()
                && (!cluster || validate_cluster_prefix(prefix).is_ok());
            if fits {
                // The longer ones first: those in scope before the others.
                scope += usize::from(inside);
                under.push((
                    KeySpace::new(Some(prefix.to_owned())),
                    Named::Lock(key.to_owned()),
                ));
            }
        }
        if self.prefix().is_none() || validate_key(redis_key).is_ok() {
            under.push((KeySpace::new(None), Named::Lock(redis_key.to_owned())));
        }
        if self.prefix().is_none() {
            scope = under.len();
        }
        Target {
            caller,
            known: self.prefix().is_none() && under.len() == 1,
            under,
            scope,
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
                    // The caller's name, under the caller's own prefix (the
                    // last in scope).
                    let target = space.target(&hold.caller_key(), cluster).unwrap();
                    let (own, named) = &target.under[target.scope - 1];
                    assert_eq!((own.prefix(), named), (space.prefix(), &hold));
                    for internal in [&keys.fence, &keys.marks, &keys.queue, &keys.waiters] {
                        assert_eq!(space.named(internal, cluster), None, "{internal}");
                    }
                }
                assert_eq!(space.named(&space.audit_key(), cluster), None);
            }
        }
        // Any permit index costs one key (not one per permit below it).
        let space = KeySpace::new(Some("p".into()));
        let huge = space
            .target("__redmutex__:permit:4294967295:x", false)
            .unwrap();
        let keys = huge.keys(false);
        assert_eq!(&*keys[0].locks, ["p:__redmutex__:permit:4294967295:x"]);
        for bad in [
            "__redmutex__:fence",
            "",
            "team:__redmutex__:fence",
            "x__redmutex__:permit:0:a",
        ] {
            assert!(space.target(bad, false).is_err(), "{bad}");
        }
        let space = KeySpace::new(Some("a*b".into()));
        assert_eq!(space.scan_pattern(), "a\\*b:*");
    }

    /// Each prefix of a target and its name there.
    fn under(t: &Target) -> Vec<(Option<&str>, String)> {
        t.under
            .iter()
            .map(|(space, named)| (space.prefix(), named.caller_key()))
            .collect()
    }

    #[test]
    fn a_lock_key_may_be_under_each_prefix_it_starts_with_and_an_internal_key_under_its_own() {
        let (root, a) = (KeySpace::new(None), KeySpace::new(Some("a".into())));
        let want = [
            (Some("a:b"), "c".to_owned()),
            (Some("a"), "b:c".to_owned()),
            (None, "a:b:c".to_owned()),
        ];
        let t = root.target("a:b:c", false).unwrap();
        assert_eq!(
            (under(&t), t.known, t.caller.as_str()),
            (want.to_vec(), false, "a:b:c")
        );
        // A locker of a prefix reads and breaks under it and those nested
        // in it (in scope), and looks at the outer ones and none.
        let t = a.target("b:c", false).unwrap();
        assert_eq!(
            (under(&t), t.scope, t.known, t.caller.as_str()),
            (want.to_vec(), 2, false, "b:c")
        );
        assert_eq!(under(&t.within().unwrap()), want[..2].to_vec());
        let t = a.target("c", false).unwrap();
        assert_eq!(
            (under(&t), t.scope, t.known),
            (
                vec![(Some("a"), "c".to_owned()), (None, "a:c".to_owned())],
                1,
                false
            )
        );
        assert!(root.target("a:b:c", false).unwrap().within().is_none());
        // No empty prefix or key; on a cluster, no prefix with a broken tag.
        let t = root.target(":x:", false).unwrap();
        assert_eq!((under(&t), t.known), (vec![(None, ":x:".to_owned())], true));
        let t = root.target("x{y:z", true).unwrap();
        assert_eq!(under(&t), [(None, "x{y:z".to_owned())]);
        // `ab` is not nested in `a`.
        let ab = KeySpace::new(Some("ab".into()));
        assert_eq!(
            under(&ab.target("x", false).unwrap().within().unwrap()),
            [(Some("ab"), "x".to_owned())]
        );
        // An internal key of a nested prefix: found, and named back.
        let key = "a:team:__redmutex__:permit:0:x";
        let found = a.found(key, false).unwrap();
        assert_eq!(found.caller, "team:__redmutex__:permit:0:x");
        let own = [(Some("a:team"), "__redmutex__:permit:0:x".to_owned())];
        assert_eq!(under(&found), own);
        assert_eq!(under(&a.target(&found.caller, false).unwrap()), own);
        let found = root.found(key, false).unwrap();
        assert_eq!(found.caller, key);
        assert_eq!(under(&root.target(key, false).unwrap()), own);
        // Other internal keys, and keys of no prefix nested in this one.
        for other in [
            "a:__redmutex__:fence",
            "a:team:__redmutex__:queue:x",
            "ab:__redmutex__:permit:0:x",
            "__redmutex__:permit:0:x",
        ] {
            assert!(a.found(other, false).is_none(), "{other}");
        }
        assert_eq!(a.found("a:x", false).unwrap().caller, "x");
        assert!(a.found("ab:x", false).is_none());
    }
}
