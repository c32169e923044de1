//! Operating it: the `Locker` methods an operator uses, to list every
//! hold of a prefix (and of those nested in it), break one with its holder
//! told, and read the audit trails. The mechanism is in `raw/operate.rs`.

use std::time::SystemTime;

use crate::info::{AuditEntry, LockInfo};
use crate::locker::Locker;
use crate::Error;

/// The longest reason a break accepts, in bytes.
const MAX_REASON: usize = 1024;

impl Locker {
    /// Every lock, permit, read or write hold and election leader under
    /// this locker's prefix right now, and under the prefixes nested in it
    /// (`<prefix>:team`; without a prefix, under every prefix), sorted by
    /// [`key`](LockInfo::key), each with its own
    /// [`prefix`](LockInfo::prefix), kind, holder metadata, time left,
    /// fencing token and live waiters (their metadata, in queue order, as
    /// its own prefix keeps them). Keys that are not holds (the fencing
    /// counters, queues, waiters, marks, election logs, the audit trails)
    /// are never listed, nor a key redmutex did not write (another value,
    /// or one without an expiry: see [`LockInfo`]). Blocks for the walk.
    ///
    /// Each is named as this locker names it ([`LockInfo::key`]: lock `nr`
    /// of prefix `jobs:team` is `team:nr` to a locker of prefix `jobs`,
    /// `jobs:team:nr` to one without a prefix), the name
    /// [`holder`](Locker::holder) and [`break_lock`](Locker::break_lock)
    /// take; [`LockInfo::key_in_prefix`] is its name under its own prefix.
    ///
    /// # Cost
    ///
    /// It walks the keyspace with `SCAN` (never `KEYS`): on one server, on
    /// each master of a Cluster, on each instance of a Redlock locker. Each
    /// step is one round trip that looks at about 500 keys of the prefix's
    /// pattern (`<prefix>:*`, and string keys only), so the server is never
    /// busy for long, but the walk takes about `N / 500` round trips for a
    /// database of `N` keys matching the pattern: without a prefix, that
    /// is every string key of the database. Then one round trip (one
    /// script) per hold found, reading at most 100 waiters each: on one
    /// server (or Redlock's), each step reads the values of the keys it
    /// finds and keeps the holds'; on a Cluster, where a script may not
    /// read keys in other slots, every string key of the prefix found
    /// costs that round trip (a prefix keeps it to the locks). A hold
    /// granted or freed during the walk may or may not be listed, as
    /// `SCAN` promises.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] and [`Error::Pool`] when Redis fails or cannot be
    /// reached (with several instances, [`Error::NoQuorum`] when fewer
    /// than a majority can be walked).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// for info in locker.locks()? {
    ///     println!(
    ///         "{} {} ({}) held by {} for {:?} more, token {}, {} waiting",
    ///         info.prefix().unwrap_or("-"),
    ///         info.key_in_prefix(),
    ///         info.kind().as_str(),
    ///         info.metadata(),
    ///         info.ttl(),
    ///         info.fencing_token(),
    ///         info.waiters().len()
    ///     );
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn locks(&self) -> Result<Vec<LockInfo>, Error> {
        self.locks_matching("*")
    }

    /// As [`locks`](Locker::locks), only the holds whose
    /// [`key`](LockInfo::key) matches the glob `pattern`: `*` matches any
    /// run of characters, `?` any one character, `\` makes the next one
    /// plain. Holds that do not match are not read (the walk is the same).
    ///
    /// # Errors
    ///
    /// As [`locks`](Locker::locks).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let nightly = locker.locks_matching("nightly-*")?;
    /// # let _ = nightly;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn locks_matching(&self, pattern: &str) -> Result<Vec<LockInfo>, Error> {
        let shared = self.shared();
        let holds = shared.scan_holds(&|name| glob(pattern, name))?;
        let mut out = Vec::with_capacity(holds.len());
        for hold in holds {
            // A key redmutex did not write (token 0) is no hold of ours.
            if let Some(info) = shared.read_hold(&hold)?.filter(|i| i.fencing_token() > 0) {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// Frees the hold `key` for an operator, whoever holds it: a lock by
    /// its key, a permit, a read-write lock's hold or an election's leader
    /// by the name [`locks`](Locker::locks) gives it ([`LockInfo::key`]). Returns the
    /// hold as it was, with its live waiters as they were (the first of
    /// them is the one it is handed to), or `None` when it was free (then
    /// nothing changes). One round trip, and for a hold broken one more for
    /// its audit event.
    ///
    /// It is broken under its own prefix ([`LockInfo::prefix`]), whichever
    /// prefix this locker has: a locker without a prefix breaks lock `nr`
    /// of prefix `jobs` by its key, `jobs:nr`, as a locker of `jobs` would
    /// by `nr`, with its holder told, its waiters handed it, and its event
    /// in the trail of `jobs`. Nothing is written under a prefix that has
    /// not granted its token. When several prefixes a lock key may be
    /// under have granted tokens up to its own (both `jobs` and `jobs:team`
    /// for `jobs:team:nr`), it is taken for the longest one's, and its
    /// holder's mark is left with each of them, so that its holder is told
    /// whichever it is under (a defect: its waiters and trail are then the
    /// longest prefix's, which may not be its own; only a record of the
    /// prefix in the hold can tell). A key given under the wrong prefix
    /// names another key: it is free (`None`), or another hold. A lock key
    /// held under a prefix outside this locker's (an outer one, or none:
    /// lock `jobs:nr` of no prefix, which a locker of `jobs` names `nr`) is
    /// not broken: the error names where it is held. A locker whose ACL
    /// keeps it to its prefix's keys (`~jobs:*`) cannot look at the outer
    /// prefixes' counters, and breaks such a hold as its own prefix's when
    /// that prefix has granted its token.
    ///
    /// As the holder's own release would, it frees the key and hands it to
    /// the first live waiter (or frees it for whoever asks next), and
    /// nothing else of the lock's state is touched (its queue, the other
    /// holds, the counter). It frees it at once whatever the holder's
    /// [`lock_delay`](crate::Builder::lock_delay): a break is the
    /// operator's override, and the delay does not cover it. Besides:
    /// - the fencing counter stays at or above the broken holder's token,
    ///   so every later grant's token is above it, and its late writes are
    ///   refused wherever tokens are checked;
    /// - the holder's next renewal (within a third of its TTL), or its own
    ///   call that finds the hold gone first (`extend`, `run_if_held`,
    ///   `unlock`, ...), is told why (until then it may still believe it
    ///   holds the lock, and write: fencing tokens refuse those writes):
    ///   its guard is lost for good, the
    ///   `redmutex::lease` error event and
    ///   [`Guard::lost_reason`](crate::Guard::lost_reason) say `broken by an
    ///   operator: <reason>`, the lease change's reason is
    ///   [`Broken`](crate::LeaseChangeReason::Broken), and the locker's
    ///   [`Stats::losses_broken`](crate::Stats::losses_broken) counts it;
    /// - the break is logged (`warn`, target `redmutex::break`) and always
    ///   written to the audit trail of its own prefix (see
    ///   [`audit`](Locker::audit)) before
    ///   this returns (waiting at most the checkout and I/O timeouts for
    ///   it, a failure logged).
    ///
    /// Breaking one key of a multi-key lock frees that key only; its holder
    /// loses the whole lock at its next renewal. Breaking an election's
    /// leader (`__redmutex__:election:<name>`) hands the lead to the first
    /// candidate queued, or leaves the election without a leader, and logs
    /// it as a resignation would: observers are told at once (the next
    /// leader, or "no leader"); the broken leader's
    /// [`Leadership`](crate::Leadership) is lost as a guard is.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an empty or over-long (1024 bytes)
    /// `reason`, for a `key` that names no hold, for a lock key held under
    /// a prefix outside this locker's (saying which), for a key that
    /// redmutex did not write (another value, or one without an expiry:
    /// left alone, see [`LockInfo`]), and for a lock key that none of the
    /// prefixes it may be under has granted (its counter is gone, or it
    /// was not written by redmutex: nothing tells whose holder to tell, so
    /// it is left alone until its TTL runs out); [`Error::Redis`] and
    /// [`Error::Pool`] when Redis fails or cannot be reached.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// match locker.break_lock("nightly-report", "host build-03 is gone")? {
    ///     Some(was) => println!("broke {}'s hold (token {})", was.metadata(), was.fencing_token()),
    ///     None => println!("it was free"),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn break_lock(
        &self,
        key: impl AsRef<str>,
        reason: &str,
    ) -> Result<Option<LockInfo>, Error> {
        if reason.trim().is_empty() || reason.len() > MAX_REASON {
            return Err(Error::InvalidInput(format!(
                "a break needs a reason of 1 to {MAX_REASON} bytes"
            )));
        }
        let shared = self.shared();
        let cluster = shared.config.topology.is_cluster();
        let hold = shared.config.keys.target(key.as_ref(), cluster)?;
        shared.break_hold(&hold, reason)
    }

    /// The prefix's audit trail from `since` on (all of it with `None`; by
    /// [`AuditEntry::time`], from the millisecond of `since`, as those
    /// times are whole milliseconds), oldest first: every break of a hold
    /// under this prefix (whichever locker broke it), and with
    /// [`Builder::audit`](crate::Builder::audit) every grant, release and
    /// downgrade of the lockers that turned it on (leaderships' too). The events of one
    /// hold are in the order the server made them, whichever locker wrote
    /// them first: by fencing token, each grant before the release or
    /// break of its token (a hold's tokens rise with each grant). A lock
    /// handed over to a waiter is granted once the waiter takes it up; one
    /// whose take-up failed is in the trail only as the next grant. It is a capped Redis stream,
    /// `<prefix>:__redmutex__:audit`, of about the latest 10,000 events;
    /// on a Cluster it lives in the slot of that name (or of the prefix's
    /// hash tag), on a Redlock locker on the first instance. Writing an
    /// event is best effort: it is queued and written by a thread of the
    /// locker, and one that fails is logged and never fails or delays the
    /// lock operation, so the trail may miss events. One round trip, after
    /// this locker's queued events are written (waiting for them at most
    /// the checkout and I/O timeouts).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] and [`Error::Pool`] when Redis fails or cannot be
    /// reached.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, SystemTime};
    /// let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    /// for e in locker.audit(Some(hour_ago))? {
    ///     println!("{} {} {} {}", e.time_rfc3339(), e.action(), e.key(), e.reason());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn audit(&self, since: Option<SystemTime>) -> Result<Vec<AuditEntry>, Error> {
        self.shared().read_audit(since)
    }

    /// As [`audit`](Locker::audit), the trails of this prefix and of every
    /// prefix nested in it (`<prefix>:team`; without a prefix, of every
    /// prefix), each event with its [`prefix`](AuditEntry::prefix), all in
    /// the order of their times (each trail's in its order). The trails are
    /// found by a `SCAN` walk of the first instance for their keys (of
    /// each master of a Cluster), which costs as
    /// [`locks`](Locker::locks)'s walk does; then one round trip per trail.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] and [`Error::Pool`] when Redis fails or cannot be
    /// reached.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// // An operator's locker, without a prefix: every prefix's trail.
    /// let operator = redmutex::Locker::builder(pool).build()?;
    /// for e in operator.audit_all(None)? {
    ///     let prefix = e.prefix().unwrap_or("-");
    ///     println!("{prefix} {} {} {} {}", e.action(), e.kind().as_str(), e.key(), e.reason());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn audit_all(&self, since: Option<SystemTime>) -> Result<Vec<AuditEntry>, Error> {
        self.shared().read_audits(since)
    }
}

/// Whether `text` matches the glob `pattern` (`*`, `?`, `\` escapes).
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative matching with one backtrack point for the last `*`.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        let (token, next) = match p.get(pi) {
            Some('\\') => (p.get(pi + 1).map(|c| (false, *c)), pi + 2),
            Some(c) => (Some((true, *c)), pi + 1),
            None => (None, pi),
        };
        match token {
            Some((true, '*')) => {
                star = Some((next, ti));
                pi = next;
                continue;
            }
            Some((plain, c)) if (plain && c == '?') || t.get(ti) == Some(&c) => {
                pi = next;
                ti += 1;
                continue;
            }
            _ => {}
        }
        match star {
            Some((sp, st)) => {
                pi = sp;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    while p.get(pi) == Some(&'*') {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("*", "anything"));
        assert!(glob("rep*", "report"));
        assert!(!glob("rep*", "a-report"));
        assert!(glob("*port", "report"));
        assert!(glob("r?port", "report"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
        assert!(glob("\\*x", "*x"));
        assert!(!glob("\\*x", "ax"));
        assert!(glob("*exports", "__redmutex__:permit:0:exports"));
        assert!(!glob("abc", "ab"));
        assert!(!glob("ab", "abc"));
    }
}
