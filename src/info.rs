//! `LockInfo`: what `Locker::holder` reports about a held key; `Leader`:
//! what `Election::leader` reports about an election.

use std::time::Duration;

/// Who holds a key right now, as returned by
/// [`Locker::holder`](crate::Locker::holder).
///
/// A key that exists but was not written by redmutex (another type, or a
/// string that is not `<owner token>:<fencing token>:<metadata>`) is
/// reported with empty metadata and a fencing token of 0: it blocks the
/// lock all the same.
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
    pub(crate) metadata: String,
    pub(crate) ttl: Duration,
    pub(crate) fencing_token: u64,
}

impl LockInfo {
    /// The holder's metadata (see [`Builder::metadata`](crate::Builder::metadata)).
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

    /// The time left on the lease in Redis (`Duration::MAX` for a key with no
    /// expiry, which only a foreign writer can create).
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

    /// The holder's fencing token (0 for a key redmutex did not write).
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
