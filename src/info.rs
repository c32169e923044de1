//! `LockInfo`: what `Locker::holder` and `Locker::locks` report about a
//! held key; `LockKind`, what it holds; `AuditEntry`, one event of the
//! audit trail `Locker::audit` reads back; `Leader`: what `Election::leader`
//! reports about an election.

use std::time::{Duration, SystemTime};

/// Who holds a key right now, as returned by
/// [`Locker::holder`](crate::Locker::holder) and listed by
/// [`Locker::locks`](crate::Locker::locks).
///
/// Only holds are reported. A key that exists but was not written by
/// redmutex (another type, a string that is not `<owner
/// token>:<fencing token>:<metadata>` with a token a grant can have, from
/// 1 to 2^63 - 1, or one without an expiry, which redmutex never writes)
/// is no hold: `holder` and
/// [`Locker::break_lock`](crate::Locker::break_lock) refuse it with
/// [`Error::InvalidInput`](crate::Error::InvalidInput), and `locks` never
/// lists it. It blocks the lock all the same, until it goes.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// if let Some(info) = locker.holder("nightly-report")? {
///     println!("held by {} for another {:?}", info.metadata(), info.ttl());
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    pub(crate) key: String,
    pub(crate) prefix: Option<String>,
    pub(crate) own_key: String,
    pub(crate) kind: LockKind,
    pub(crate) name: String,
    pub(crate) metadata: String,
    pub(crate) ttl: Duration,
    pub(crate) fencing_token: u64,
    pub(crate) waiters: Vec<String>,
}

/// What a [`LockInfo`] (or an [`AuditEntry`]) is about.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// use redmutex::LockKind;
/// for info in locker.locks()? {
///     if info.kind() == LockKind::Permit {
///         println!("a permit of semaphore {}", info.name());
///     }
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A lock ([`Locker::lock`](crate::Locker::lock)); one key of a
    /// multi-key lock is listed as a lock of its own.
    Lock,
    /// One permit of a [`Semaphore`](crate::Semaphore).
    Permit,
    /// One read hold of a [`RwLock`](crate::RwLock).
    Read,
    /// The write hold of a [`RwLock`](crate::RwLock).
    Write,
    /// The leader of an [`Election`](crate::Election): its
    /// [`name`](LockInfo::name) is the election's, its metadata the
    /// leader's value, its fencing token the term, and its waiters the
    /// values of the candidates queued.
    Leader,
}

impl LockKind {
    /// `lock`, `permit`, `read`, `write` or `leader`: how the audit trail
    /// and the `redmutex` command write it.
    ///
    /// ```
    /// assert_eq!(redmutex::LockKind::Permit.as_str(), "permit");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Lock => "lock",
            LockKind::Permit => "permit",
            LockKind::Read => "read",
            LockKind::Write => "write",
            LockKind::Leader => "leader",
        }
    }

    /// The kind [`as_str`](LockKind::as_str) wrote, if it is one.
    pub(crate) fn parse(text: &str) -> Option<LockKind> {
        [
            LockKind::Lock,
            LockKind::Permit,
            LockKind::Read,
            LockKind::Write,
            LockKind::Leader,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

impl LockInfo {
    /// A lock with nothing known of it yet.
    pub(crate) fn blank() -> LockInfo {
        LockInfo {
            key: String::new(),
            prefix: None,
            own_key: String::new(),
            kind: LockKind::Lock,
            name: String::new(),
            metadata: String::new(),
            ttl: Duration::ZERO,
            fencing_token: 0,
            waiters: Vec::new(),
        }
    }

    /// The hold's name, as the locker that read it names it: what its
    /// [`holder`](crate::Locker::holder) and
    /// [`break_lock`](crate::Locker::break_lock) take. For a hold under
    /// that locker's own prefix, a lock's key (without the prefix); for a
    /// permit `__redmutex__:permit:<i>:<name>`, for a read hold
    /// `__redmutex__:rw-read:<id>:<name>`, for the write hold
    /// `__redmutex__:rw-write:<name>`, for an election's leader
    /// `__redmutex__:election:<name>`, where `<name>` is the semaphore's,
    /// read-write lock's or election's name (see [`name`](LockInfo::name))
    /// and `<id>` is drawn for that read hold. No lock key can contain
    /// `__redmutex__`, so the names never meet. For a hold under another
    /// prefix (see [`prefix`](LockInfo::prefix)), the same name with that
    /// prefix's own part before it: a locker of prefix `jobs` names lock
    /// `nr` of prefix `jobs:team` `team:nr`, a locker without a prefix
    /// names it `jobs:team:nr`; and permit `0` of semaphore `x` of prefix
    /// `jobs:team` `team:__redmutex__:permit:0:x` and
    /// `jobs:team:__redmutex__:permit:0:x`.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// for info in locker.locks()? {
    ///     println!("{} held by {}", info.key(), info.metadata());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The prefix the hold is under (`None`: no prefix), whichever
    /// locker read it. A lock key does not say it: `jobs:team:nr` is lock
    /// `nr` of prefix `jobs:team`, lock `team:nr` of `jobs`, or lock
    /// `jobs:team:nr` of no prefix. Of those, the hold is under the longest
    /// prefix that has granted its fencing token (every grant leaves its
    /// prefix's fencing counter at or above the token it gives); a
    /// permit's, a read-write lock's or a leader's key names its prefix.
    /// So a locker of any prefix (or none) reads its waiters, and
    /// [`break_lock`](crate::Locker::break_lock) breaks it, where its own
    /// prefix keeps them.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// // Without a prefix: every prefix's holds, each with its own.
    /// for info in locker.locks()? {
    ///     println!("{} {}", info.prefix().unwrap_or("-"), info.key_in_prefix());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    /// The hold's name under its own [`prefix`](LockInfo::prefix), as a
    /// locker of that prefix names it ([`key`](LockInfo::key) is the name
    /// the locker that read it gives it): `nr` for lock `nr` of prefix
    /// `jobs`, whichever locker listed it.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let operator = redmutex::Locker::builder(pool).build()?;
    /// for info in operator.locks()? {
    ///     // `redmutex break --prefix jobs nr` for a lock `nr` of prefix `jobs`.
    ///     match info.prefix() {
    ///         Some(p) => println!("--prefix {p} {}", info.key_in_prefix()),
    ///         None => println!("{}", info.key_in_prefix()),
    ///     }
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn key_in_prefix(&self) -> &str {
        &self.own_key
    }

    /// What is held: a lock, a permit, a read or the write hold, or an
    /// election's lead.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let info = locker.holder("k")?.unwrap();
    /// assert_eq!(info.kind(), redmutex::LockKind::Lock);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The lock's key, or the name of the semaphore, read-write lock or
    /// election the hold belongs to.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let permit = locker.semaphore("exports", 4)?.acquire()?;
    /// for info in locker.locks_matching("*exports")? {
    ///     assert_eq!(info.name(), "exports");
    /// }
    /// # drop(permit);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The metadata of the live waiters queued for it, first come first
    /// (for a permit, the semaphore's waiters; for a read-write lock's
    /// hold, that lock's; for a leader, the values of the candidates).
    /// Their number is `waiters().len()`. Never their owner tokens. At most
    /// 100 are read.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// for info in locker.locks()? {
    ///     println!("{}: {} waiting, next {:?}", info.key(), info.waiters().len(), info.waiters().first());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn waiters(&self) -> &[String] {
        &self.waiters
    }

    /// The holder's metadata (see [`Builder::metadata`](crate::Builder::metadata));
    /// for a leader, its value.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let info = locker.holder("k")?.unwrap();
    /// println!("{}", info.metadata()); // e.g. "build-03:4711"
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn metadata(&self) -> &str {
        &self.metadata
    }

    /// The time left on the lease in Redis, when it was read.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let info = locker.holder("k")?.unwrap();
    /// let left = info.ttl();
    /// # let _ = left;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The holder's fencing token (never 0).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let info = locker.holder("k")?.unwrap();
    /// println!("current holder's token: {}", info.fencing_token());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }
}

/// One event of a prefix's audit trail, as
/// [`Locker::audit`](crate::Locker::audit) reads it back.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// for e in locker.audit(None)? {
///     println!("{} {} {} {} by {:?}: {}", e.time_rfc3339(), e.action(), e.kind().as_str(), e.key(), e.metadata(), e.reason());
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub(crate) time: SystemTime,
    pub(crate) prefix: Option<String>,
    pub(crate) key: String,
    pub(crate) kind: LockKind,
    pub(crate) action: String,
    pub(crate) metadata: String,
    pub(crate) fencing_token: u64,
    pub(crate) reason: String,
}

impl AuditEntry {
    /// When it happened, by the clock of the Redis server that keeps the
    /// trail, in whole milliseconds: the millisecond it was written there
    /// (its stream entry's ID), or, when the server made a later event of
    /// the same hold that was written first (by another locker, or another
    /// thread of this one), that event's, so that a hold's events read in
    /// order in time too. On one server it is never a millisecond before
    /// the event's, and at most the writer's queue delay after it.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let e = locker.audit(None)?.remove(0);
    /// let age = std::time::SystemTime::now().duration_since(e.time()).unwrap_or_default();
    /// println!("{} ({age:.0?} ago)", e.time_rfc3339());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn time(&self) -> SystemTime {
        self.time
    }

    /// [`time`](AuditEntry::time) as an RFC 3339 timestamp in UTC, to the
    /// millisecond (`2026-11-26T03:02:11.412Z`), as `redmutex audit` prints
    /// it: for a log line or a report, without a date-time crate.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// for e in locker.audit(None)? {
    ///     println!("{} {} {}", e.time_rfc3339(), e.action(), e.key());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn time_rfc3339(&self) -> String {
        rfc3339(self.time)
    }

    /// The hold's name under the prefix of the trail
    /// ([`prefix`](AuditEntry::prefix)), as a locker of that prefix names
    /// it ([`LockInfo::key_in_prefix`]).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let e = locker.audit(None)?.remove(0);
    /// println!("{}", e.key());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The prefix whose trail holds it, the hold's own (`None`: no
    /// prefix): the locker's for [`Locker::audit`](crate::Locker::audit),
    /// each trail's for [`Locker::audit_all`](crate::Locker::audit_all).
    /// A break is written to the trail of the prefix the hold is under
    /// (see [`LockInfo::prefix`]), whichever locker broke it.
    ///
    /// ```no_run
    /// # let pool = redmutex::pool("redis://127.0.0.1/")?;
    /// let operator = redmutex::Locker::builder(pool).build()?;
    /// for e in operator.audit_all(None)? {
    ///     println!("{} {} {}", e.prefix().unwrap_or("-"), e.action(), e.key());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }

    /// What the hold was.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let e = locker.audit(None)?.remove(0);
    /// println!("{}", e.kind().as_str());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// `break` (an operator's [`Locker::break_lock`](crate::Locker::break_lock)),
    /// or with [`Builder::audit`](crate::Builder::audit) on, `grant`,
    /// `release` and `downgrade` (a write hold that
    /// [became a read hold](crate::Guard::downgrade), whose `grant` follows).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let breaks = locker.audit(None)?.into_iter().filter(|e| e.action() == "break").count();
    /// # let _ = breaks;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn action(&self) -> &str {
        &self.action
    }

    /// The metadata of the holder (for a break, of the holder broken; for
    /// a leader, its value).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let e = locker.audit(None)?.remove(0);
    /// println!("{}", e.metadata());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn metadata(&self) -> &str {
        &self.metadata
    }

    /// The fencing token of the hold (for a break, of the holder broken).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let e = locker.audit(None)?.remove(0);
    /// println!("{}", e.fencing_token());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The reason the operator gave for a break; empty for other actions.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let e = locker.audit(None)?.remove(0);
    /// println!("{}", e.reason());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// An election's leader, as [`Election::leader`](crate::Election::leader)
/// and [`Observer`](crate::Observer) report it: the value it campaigned
/// with or proclaimed since, its term, and how long its lease has left.
///
/// Two reports are of the same leader in the same state when their
/// [`term`](Leader::term) and [`value`](Leader::value) are equal (`==`
/// compares those two, not the time left).
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// if let Some(leader) = locker.election("scheduler")?.leader()? {
///     println!("{} leads (term {}, {:?} left)", leader.value(), leader.term(), leader.ttl());
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Leader {
    pub(crate) value: String,
    pub(crate) term: u64,
    pub(crate) ttl: Duration,
}

impl PartialEq for Leader {
    fn eq(&self, other: &Leader) -> bool {
        self.term == other.term && self.value == other.value
    }
}

impl Eq for Leader {}

impl Leader {
    /// The leader's value: what it campaigned with, or proclaimed since
    /// (its address, say).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let leader = locker.election("scheduler")?.leader()?.unwrap();
    /// let address = leader.value(); // e.g. "10.0.0.7:8080"
    /// # let _ = address;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The leader's term: the fencing token of its leadership, larger for
    /// every later leader of the election (see
    /// [`Leadership::term`](crate::Leadership::term)).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let leader = locker.election("scheduler")?.leader()?.unwrap();
    /// println!("term {}", leader.term());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn term(&self) -> u64 {
        self.term
    }

    /// How long the leader's lease had left in Redis when it was read
    /// (`Duration::ZERO` in an observer's report of a change from the log,
    /// which is past). Its watchdog renews it while it lives.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// # let leader = locker.election("scheduler")?.leader()?.unwrap();
    /// println!("{:?} left", leader.ttl());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (RFC 3339, UTC); a time before 1970
/// as 1970-01-01 (a server's clock never gives one).
fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn rfc3339_times() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_671_238_320);
        assert_eq!(rfc3339(t), "2026-11-26T05:33:58.320Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
        let end = UNIX_EPOCH + Duration::from_millis(4_102_444_799_999); // 2099-12-31
        assert_eq!(rfc3339(end), "2099-12-31T23:59:59.999Z");
    }
}
