//! Every Redis key name the crate uses is built here and nowhere else.
//!
//! - A lock on `key` lives at `<prefix>:<key>`, or at `key` itself without a
//!   prefix. It is a string `<owner token>:<fencing token>:<metadata>` with
//!   a TTL: one `SET` to take it, one `GET` to check it.
//! - The fencing counter of a prefix lives at `<prefix>:__redmutex__:fence`,
//!   or `__redmutex__:fence` without a prefix: one key per prefix, whatever the
//!   number of lock names, so nothing grows with the names used.
//! - On a Redis Cluster a script's keys must share a hash slot, so there is
//!   one counter per prefix *and slot*: `<prefix>:__redmutex__:fence:{<tag>}`,
//!   where `<tag>` is a short string that hashes to the lock keys' slot. At
//!   most 16384 counters per prefix, however many lock names are used.
//!
//! - While threads wait for the lock on `key`, they queue first come, first
//!   served in `<prefix>:__redmutex__:queue:<key>` (a sorted set) and
//!   `<prefix>:__redmutex__:waiters:<key>` (a hash); both expire soon after
//!   the last waiter leaves or dies. On a cluster, `{<tag>}:` stands before
//!   `<key>` in both.
//! - A semaphore `name` keeps each permit as a lock key of its own,
//!   `<prefix>:__redmutex__:permit:<i>:<name>`, and queues its waiters in
//!   `...:permit-queue:<name>` and `...:permit-waiters:<name>` (on a
//!   cluster with `{<tag>}:` before `<i>` and `<name>`, all in the slot of
//!   the name's lock key).
//! - A read-write lock `name` keeps its writer as a lock key,
//!   `<prefix>:__redmutex__:rw-write:<name>`, and each read hold as a lock
//!   key of its own, `...:rw-read:<id>:<name>`, where `<id>` is drawn for
//!   that hold (never its owner token); `...:rw-readers:<name>` is the set
//!   of read-hold keys, and `...:rw-queue:<name>`, `...:rw-waiters:<name>`
//!   its queue (on a cluster with `{<tag>}:` before `<id>` and `<name>`).
//! - When an operator breaks a hold (`Locker::break_lock`), the broken
//!   owner token and the reason are kept in the hash
//!   `<prefix>:__redmutex__:marks` (on a cluster `...:marks:{<tag>}`, one
//!   per slot as the counter) until the broken key's TTL has passed and 5 s
//!   more, for the holder's next renewal to read.
//! - A guarded write on a Cluster marks its run, for a few seconds, at
//!   `<counter>:run:<id>` (beside the slot's fencing counter, `<id>` drawn
//!   for the call), so that a request redis-rs sends again runs nothing.
//! - A fenced run (`fence::admit_and_run`) on a Cluster connection marks
//!   its run the same way on the resource's server, at
//!   `__redmutex__:run:{<tag>}:<id>` in the fence key's slot, for a minute.
//! - The audit trail of a prefix is the stream `<prefix>:__redmutex__:audit`
//!   (one key: on a cluster, in that name's slot).
//! - An election `name` keeps its leader as a lock key,
//!   `<prefix>:__redmutex__:election:<name>` (whose metadata is the
//!   leader's value), queues its candidates in `...:election-queue:<name>`
//!   and `...:election-waiters:<name>`, and logs each change of leader or
//!   value in the capped stream `...:election-log:<name>` (on a cluster
//!   with `{<tag>}:` before `<name>`).
//! - Lock-delay marks (see `lua/lib/delay.lua`) live in a hash beside each
//!   lock: `...:delay:<key>` for each key of a lock (so a lock on several
//!   keys and one on each of them see the same marks),
//!   `...:permit-delay:<name>`, `...:rw-delay:<name>`,
//!   `...:election-delay:<name>`, in the lock's slot on a cluster; each
//!   expires with its latest mark.
//! - Releases are announced on the pub/sub channel
//!   `<prefix>:__redmutex__:released`, so waiters elsewhere retry at once
//!   instead of at their next backoff (the messages are described in
//!   `wake/listener.rs`). On a cluster, on the shard channel of the lock's
//!   slot instead, `<prefix>:__redmutex__:released:{<tag>}` (`SPUBLISH`:
//!   the message stays on the shard that owns the slot).
//!
//! Keys and prefixes with [`RESERVED`] anywhere in them are refused. So a
//! lock key (`<prefix>:<key>` or `<key>`) never contains the marker, while
//! every internal key does, right after its own prefix: no lock key of any
//! prefix can be an internal key of any prefix. And an internal key names
//! its kind (`fence`, `queue:`, `waiters:`) before the caller's key, so the
//! internal keys of two lock names never meet either.

use std::sync::Arc;

use crate::protocol::slots;
use crate::Error;

/// The namespace the crate keeps for its own keys.
pub(crate) const RESERVED: &str = "__redmutex__";

/// The Redis keys one acquisition uses: its lock keys (in the caller's
/// order), the fencing counter they share, and the waiters' queue and their
/// entries (used for single-key locks; see `scripts::ACQUIRE`).
#[derive(Debug, Clone)]
pub(crate) struct LockKeys {
    pub(crate) locks: Arc<[String]>,
    pub(crate) fence: String,
    /// The marks of broken holds in their slot (see `lua/lib/marks.lua`):
    /// `<prefix>:__redmutex__:marks`, and on a cluster `...:marks:{<tag>}`
    /// as the counter.
    pub(crate) marks: String,
    pub(crate) queue: String,
    pub(crate) waiters: String,
    /// The lock-delay marks of these keys (hashes, see `lua/lib/delay.lua`):
    /// one per lock key for a lock, one for a semaphore's or a read-write
    /// lock's keys (see [`LockKeys::delays_of_each`]).
    pub(crate) delays: Arc<[String]>,
    /// What is held: a lock, a permit, or a read or the write hold.
    pub(crate) hold: Hold,
}

/// What an acquisition holds, which picks its scripts.
#[derive(Debug, Clone)]
pub(crate) enum Hold {
    /// A lock on `locks` (one key or several), or a permit once granted.
    Lock,
    /// One of the permits in `locks`, not granted yet.
    Permit,
    /// A read hold of a read-write lock: `locks` is its own key; `writer`
    /// is the lock's writer key (what its waiters watch), `readers` the set
    /// of read-hold keys.
    Read {
        writer: Arc<[String]>,
        readers: String,
    },
    /// The write hold of a read-write lock: `locks` is its writer key.
    Write { readers: String },
    /// An election's leader: `locks` is its one election key, `log` the
    /// capped stream of its changes that observers read.
    Leader { log: String },
}

impl LockKeys {
    /// A read-write lock's writer key (as a one-key list): a read hold's
    /// `writer`, the write hold's own key; `None` for locks and permits.
    pub(crate) fn writer(&self) -> Option<&Arc<[String]>> {
        match &self.hold {
            Hold::Read { writer, .. } => Some(writer),
            Hold::Write { .. } => Some(&self.locks),
            Hold::Lock | Hold::Permit | Hold::Leader { .. } => None,
        }
    }

    /// The lock-delay marks of each lock key, in the order of `locks`.
    pub(crate) fn delays_of_each(&self) -> Vec<&str> {
        let shared = self.delays.first().map_or("", String::as_str);
        (0..self.locks.len())
            .map(|i| self.delays.get(i).map_or(shared, String::as_str))
            .collect()
    }

    /// The keys whose release a waiter for these keys watches: a
    /// read-write lock's writer key, else the lock keys.
    pub(crate) fn watched(&self) -> &Arc<[String]> {
        self.writer().unwrap_or(&self.locks)
    }
}

/// Maps caller keys to Redis keys for one prefix.
#[derive(Debug, Clone)]
pub(crate) struct KeySpace {
    prefix: Option<String>,
    /// `<prefix>:__redmutex__:`, the start of every name of ours, built once
    /// (names are built on every lock call).
    reserved: String,
}

impl KeySpace {
    /// A key space for `prefix` (`None`: keys are used as given).
    pub(crate) fn new(prefix: Option<String>) -> Self {
        let reserved = match &prefix {
            Some(p) => format!("{p}:{RESERVED}:"),
            None => format!("{RESERVED}:"),
        };
        KeySpace { prefix, reserved }
    }

    /// `<prefix>:__redmutex__:`, the start of every internal key.
    pub(crate) fn reserved(&self) -> &str {
        &self.reserved
    }

    /// The prefix, if any.
    pub(crate) fn prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    /// The Redis key of the lock on `key`.
    pub(crate) fn lock_key(&self, key: &str) -> String {
        match &self.prefix {
            Some(p) => concat(&[p, ":", key]),
            None => key.to_owned(),
        }
    }

    /// The Redis key of this prefix's fencing counter.
    pub(crate) fn fence_key(&self) -> String {
        concat(&[&self.reserved, "fence"])
    }

    /// The counter for a script over `redis_keys` (all in one slot on a
    /// cluster: see [`same_slot`]).
    pub(crate) fn fence_key_for(&self, redis_keys: &[String], cluster: bool) -> String {
        self.per_slot("fence", redis_keys, cluster)
    }

    /// The marks of broken holds for a script over `redis_keys`, one hash
    /// per prefix (and slot, on a cluster) as the counter.
    pub(crate) fn marks_key_for(&self, redis_keys: &[String], cluster: bool) -> String {
        self.per_slot("marks", redis_keys, cluster)
    }

    /// `<reserved><what>`, or on a cluster `<reserved><what>:{<tag>}` in
    /// the slot of `redis_keys`.
    fn per_slot(&self, what: &str, redis_keys: &[String], cluster: bool) -> String {
        match (cluster, redis_keys.first()) {
            (true, Some(first)) => {
                let tag = slots::tag_for(slots::slot(first));
                concat(&[&self.reserved, what, ":{", tag, "}"])
            }
            _ => concat(&[&self.reserved, what]),
        }
    }

    /// The run marker of one guarded write on a Cluster (see
    /// `lua/guarded.lua`): `<counter>:run:<id>`, beside the fencing counter
    /// `fence_key` of the lock's keys, so in their slot; `id` is drawn for
    /// the call (never an owner token). It lives a few seconds.
    pub(crate) fn run_marker(fence_key: &str, id: &str) -> String {
        concat(&[fence_key, ":run:", id])
    }

    /// The run marker of one fenced run on a Cluster (see `lua/fence.lua`),
    /// on the resource's server: `__redmutex__:run:{<tag>}:<id>`, in the
    /// slot of `resource_key`; `id` is drawn for the call.
    pub(crate) fn fence_run_marker(resource_key: &str, id: &str) -> String {
        let tag = slots::tag_for(slots::slot_of_bytes(resource_key.as_bytes()));
        concat(&[RESERVED, ":run:{", tag, "}:", id])
    }

    /// The audit stream of this prefix, `<prefix>:__redmutex__:audit`: one
    /// key, so on a cluster one slot (its name's, or the prefix's hash tag's).
    pub(crate) fn audit_key(&self) -> String {
        concat(&[&self.reserved, "audit"])
    }

    /// The `SCAN` pattern of every key of this prefix: `<prefix>:*`, the
    /// prefix's glob characters escaped; `*` without a prefix.
    pub(crate) fn scan_pattern(&self) -> String {
        let Some(p) = &self.prefix else {
            return "*".to_owned();
        };
        let mut out = String::with_capacity(p.len() + 2);
        for c in p.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push_str(":*");
        out
    }

    /// The waiters' queue of the lock on `key` (a sorted set) and their
    /// entries (a hash), in the lock key's slot on a cluster. They exist
    /// only while someone waits, and expire soon after the last waiter.
    pub(crate) fn queue_keys(&self, key: &str, cluster: bool) -> (String, String) {
        let tag = self.slot_tag(key, cluster);
        (
            self.internal("queue", tag, key),
            self.internal("waiters", tag, key),
        )
    }

    /// On a cluster, the tag of the slot of `key`'s lock key, which every
    /// internal key of that name carries.
    fn slot_tag(&self, key: &str, cluster: bool) -> Option<&'static str> {
        cluster.then(|| slots::tag_for(slots::slot(&self.lock_key(key))))
    }

    /// The internal key `<reserved><kind>:<rest>`, or on a cluster
    /// `<reserved><kind>:{<tag>}:<rest>`.
    fn internal(&self, kind: &str, tag: Option<&str>, rest: &str) -> String {
        match tag {
            Some(tag) => concat(&[&self.reserved, kind, ":{", tag, "}:", rest]),
            None => concat(&[&self.reserved, kind, ":", rest]),
        }
    }

    /// Every Redis key a lock on `keys` uses (checked already: see
    /// [`validate_keys`]; on a cluster, see [`same_slot`]).
    pub(crate) fn lock_keys(&self, keys: &[&str], cluster: bool) -> LockKeys {
        let locks: Arc<[String]> = keys.iter().map(|k| self.lock_key(k)).collect();
        let first = keys.first().copied().unwrap_or_default();
        let (queue, waiters) = self.queue_keys(first, cluster);
        LockKeys {
            fence: self.fence_key_for(&locks, cluster),
            marks: self.marks_key_for(&locks, cluster),
            locks,
            queue,
            waiters,
            delays: keys
                .iter()
                .map(|k| self.internal("delay", self.slot_tag(k, cluster), k))
                .collect(),
            hold: Hold::Lock,
        }
    }

    /// Every Redis key a semaphore `name` of `permits` permits uses: a lock
    /// key per permit, `<prefix>:__redmutex__:permit:<i>:<name>`, and its
    /// own queue, `...:permit-queue:<name>` and `...:permit-waiters:<name>`
    /// (never a lock's: a lock and a semaphore of one name are apart). On a
    /// cluster, `{<tag>}:` of the name's lock key's slot stands before
    /// `<i>` and `<name>`, so all of them and the counter share a slot.
    pub(crate) fn permit_keys(&self, name: &str, permits: u32, cluster: bool) -> LockKeys {
        self.permits_keys(name, 0..permits, cluster)
    }

    /// The keys of the one permit `index` of the semaphore `name` (as
    /// [`permit_keys`](KeySpace::permit_keys), with that permit's lock key
    /// only): built without the keys of the permits below it, so any index
    /// costs the same (a listing's or an operator's, up to `u32::MAX`).
    pub(crate) fn one_permit_keys(&self, name: &str, index: u32, cluster: bool) -> LockKeys {
        self.permits_keys(name, std::iter::once(index), cluster)
    }

    /// The keys of the semaphore `name` with the lock keys of the permits
    /// numbered `indexes`.
    fn permits_keys(
        &self,
        name: &str,
        indexes: impl Iterator<Item = u32>,
        cluster: bool,
    ) -> LockKeys {
        let tag = self.slot_tag(name, cluster);
        let locks: Arc<[String]> = indexes
            .map(|i| self.internal("permit", tag, &concat(&[&i.to_string(), ":", name])))
            .collect();
        LockKeys {
            fence: self.fence_key_for(&locks, cluster),
            marks: self.marks_key_for(&locks, cluster),
            queue: self.internal("permit-queue", tag, name),
            waiters: self.internal("permit-waiters", tag, name),
            delays: Arc::from([self.internal("permit-delay", tag, name)]),
            locks,
            hold: Hold::Permit,
        }
    }

    /// Every Redis key a hold of the read-write lock `name` uses: a read
    /// hold with its own `id` (see the module's docs), or the write hold
    /// when `read` is `None`. All in the slot of the name's lock key on a
    /// cluster.
    pub(crate) fn rw_keys(&self, name: &str, read: Option<&str>, cluster: bool) -> LockKeys {
        let tag = self.slot_tag(name, cluster);
        let writer = self.internal("rw-write", tag, name);
        let readers = self.internal("rw-readers", tag, name);
        let (locks, hold): (Arc<[String]>, Hold) = match read {
            Some(id) => (
                Arc::from([self.internal("rw-read", tag, &concat(&[id, ":", name]))]),
                Hold::Read {
                    writer: Arc::from([writer]),
                    readers,
                },
            ),
            None => (Arc::from([writer]), Hold::Write { readers }),
        };
        LockKeys {
            fence: self.fence_key_for(&locks, cluster),
            marks: self.marks_key_for(&locks, cluster),
            queue: self.internal("rw-queue", tag, name),
            waiters: self.internal("rw-waiters", tag, name),
            delays: Arc::from([self.internal("rw-delay", tag, name)]),
            locks,
            hold,
        }
    }

    /// Every Redis key the election `name` uses: its leader's lock key
    /// `<prefix>:__redmutex__:election:<name>`, its candidates' queue
    /// (`...:election-queue:<name>`, `...:election-waiters:<name>`) and
    /// the log of its changes (`...:election-log:<name>`, a capped
    /// stream); on a cluster with `{<tag>}:` of the name's lock key's slot
    /// before `<name>`, so they and the counter share a slot.
    pub(crate) fn election_keys(&self, name: &str, cluster: bool) -> LockKeys {
        let tag = self.slot_tag(name, cluster);
        let locks: Arc<[String]> = Arc::from([self.internal("election", tag, name)]);
        LockKeys {
            fence: self.fence_key_for(&locks, cluster),
            marks: self.marks_key_for(&locks, cluster),
            delays: Arc::from([self.internal("election-delay", tag, name)]),
            queue: self.internal("election-queue", tag, name),
            waiters: self.internal("election-waiters", tag, name),
            hold: Hold::Leader {
                log: self.internal("election-log", tag, name),
            },
            locks,
        }
    }

    /// The pub/sub channel on which releases of this prefix's locks are
    /// announced: `-<key>` for a freed lock, `+<token>:<fence>:<key>` for
    /// one handed over to a waiter (see `wake::listener`).
    pub(crate) fn release_channel(&self) -> String {
        concat(&[&self.reserved, "released"])
    }

    /// On a cluster, the shard channel on which releases of the locks in
    /// `slot` are announced (`SPUBLISH`): the release channel with the
    /// slot's hash tag, `<reserved>released:{<tag>}`. It ends in `}`, which
    /// is how the scripts tell it from a single server's channel (see
    /// `lua/lib/give.lua`).
    pub(crate) fn shard_release_channel(&self, slot: u16) -> String {
        concat(&[&self.reserved, "released:{", slots::tag_for(slot), "}"])
    }
}

/// The parts one after the other, in one allocation.
fn concat(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// Checks one caller key: not empty, no reserved marker anywhere in it.
pub(crate) fn validate_key(key: &str) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::InvalidInput("lock key must not be empty".into()));
    }
    if key.contains(RESERVED) {
        return Err(Error::InvalidInput(format!(
            "lock key {key:?} contains {RESERVED:?}, which is reserved for the crate's own keys"
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

/// On a cluster, a multi-key script needs every key in one hash slot: refuse
/// anything else before a command is sent.
pub(crate) fn same_slot(caller_keys: &[&str], redis_keys: &[String]) -> Result<(), Error> {
    let mut slots_seen = redis_keys.iter().map(|k| slots::slot(k));
    let Some(first) = slots_seen.next() else {
        return Ok(());
    };
    if slots_seen.all(|s| s == first) {
        return Ok(());
    }
    let listed: Vec<String> = caller_keys
        .iter()
        .zip(redis_keys)
        .map(|(k, r)| format!("{k:?} (slot {})", slots::slot(r)))
        .collect();
    Err(Error::InvalidInput(format!(
        "keys in different cluster slots cannot be locked together: {}; \
         give them a common hash tag, e.g. \"{{order42}}:a\" and \"{{order42}}:b\"",
        listed.join(", ")
    )))
}

/// Checks a prefix given to the builder.
pub(crate) fn validate_prefix(prefix: &str) -> Result<(), Error> {
    if prefix.is_empty() {
        return Err(Error::InvalidInput(
            "prefix must not be empty (leave it unset for no prefix)".into(),
        ));
    }
    if prefix.contains(RESERVED) {
        return Err(Error::InvalidInput(format!(
            "prefix {prefix:?} contains {RESERVED:?}, which is reserved for the crate's own keys"
        )));
    }
    Ok(())
}

/// On a Redis Cluster, checks that a prefix keeps every key of a lock in
/// the lock key's slot. Redis hashes the first `{...}` of a key: in a
/// prefix, a `{` must open a non-empty hash tag closed within the prefix
/// (`{jobs}`, `x{a}y`: every lock of the prefix then shares that tag's
/// slot), or the prefix must have no `{`. Otherwise (`a{b`, `{}`, `{jobs`)
/// the internal keys, which add a `{<tag>}` of their own after the prefix,
/// would hash another part of their name than the lock key does.
pub(crate) fn validate_cluster_prefix(prefix: &str) -> Result<(), Error> {
    let Some(open) = prefix.find('{') else {
        return Ok(());
    };
    let after = prefix.get(open + 1..).unwrap_or_default();
    match after.find('}') {
        Some(close) if close > 0 => Ok(()),
        _ => Err(Error::InvalidInput(format!(
            "prefix {prefix:?} has a '{{' that opens no hash tag: on a Redis Cluster a '{{' \
             in a prefix must open a non-empty hash tag closed within the prefix, \
             like \"{{jobs}}\" (all its locks then share one slot), or the prefix must \
             have none"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_prefixes_open_no_broken_hash_tag() {
        for bad in ["a{b", "{}", "{jobs", "x{}y", "}{a", "{"] {
            assert!(validate_cluster_prefix(bad).is_err(), "{bad}");
        }
        for good in ["jobs", "{jobs}", "a}b", "x{a}y", "{a}{", "a{b}c{d", "}"] {
            validate_cluster_prefix(good).unwrap();
            // What the rule is for: a good prefix's lock key and internal
            // keys hash to one slot, whatever the key.
            let space = KeySpace::new(Some(good.into()));
            for key in ["k", "{t}k", "k{", "}{"] {
                let keys = space.lock_keys(&[key], true);
                let slot = slots::slot(&space.lock_key(key));
                for k in [&keys.fence, &keys.queue, &keys.waiters] {
                    assert_eq!(slots::slot(k), slot, "{good} {key} {k}");
                }
            }
        }
    }

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
    fn cluster_counters_share_the_slot_of_their_keys() {
        let space = KeySpace::new(Some("p".into()));
        for key in ["a", "report", "{order42}:a"] {
            let lock = space.lock_key(key);
            let fence = space.fence_key_for(std::slice::from_ref(&lock), true);
            assert_eq!(slots::slot(&fence), slots::slot(&lock), "{fence}");
            assert!(fence.starts_with("p:__redmutex__:fence:{"));
        }
        let lock = space.lock_key("a");
        assert_eq!(space.fence_key_for(&[lock], false), "p:__redmutex__:fence");
    }

    #[test]
    fn queue_keys_share_the_lock_slot_on_a_cluster() {
        let space = KeySpace::new(Some("p".into()));
        let (q, d) = space.queue_keys("report", false);
        assert_eq!(q, "p:__redmutex__:queue:report");
        assert_eq!(d, "p:__redmutex__:waiters:report");
        let lock = space.lock_key("report");
        let (q, d) = space.queue_keys("report", true);
        assert_eq!(slots::slot(&q), slots::slot(&lock));
        assert_eq!(slots::slot(&d), slots::slot(&lock));
    }

    #[test]
    fn cross_slot_key_lists_are_refused() {
        let space = KeySpace::new(None);
        let ok = ["{order42}:a", "{order42}:b"];
        let ok_redis: Vec<String> = ok.iter().map(|k| space.lock_key(k)).collect();
        assert!(same_slot(&ok, &ok_redis).is_ok());
        let bad = ["foo", "bar"];
        let bad_redis: Vec<String> = bad.iter().map(|k| space.lock_key(k)).collect();
        let err = same_slot(&bad, &bad_redis).unwrap_err().to_string();
        assert!(
            err.contains("slot 12182") && err.contains("slot 5061"),
            "{err}"
        );
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(validate_key("").is_err());
        assert!(validate_key("__redmutex__:x").is_err());
        assert!(validate_key("jobs:__redmutex__:queue:x").is_err());
        assert!(validate_prefix("a:__redmutex__").is_err());
        assert!(validate_key("ok").is_ok());
        assert!(validate_keys(&[]).is_err());
        assert!(validate_keys(&["a", "b", "a"]).is_err());
        assert!(validate_keys(&["a", ""]).is_err());
        assert!(validate_keys(&["a", "b"]).is_ok());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("jobs").is_ok());
    }
}
