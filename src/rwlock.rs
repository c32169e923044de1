//! `RwLock`: many readers or one writer of a name, each hold a `Guard`.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::config::validate_wait;
use crate::guard::Guard;
use crate::locker::Locker;
use crate::protocol::keys;
use crate::Error;

/// A read-write lock: any number of readers of its name at once, or one
/// writer and no reader, across every locker on the same server and
/// prefix. Made by [`Locker::rwlock`]; a cheap handle (a clone of the
/// locker and the name).
///
/// Each hold, read or write, is a [`Guard`] with the whole lease API of a
/// lock: its watchdog renews it, [`Guard::is_lost`] tells the moment it can
/// no longer be promised, and [`Guard::fencing_token`] rises with every
/// grant of the name, readers' included. Every hold is kept in Redis as a
/// key of its own with a TTL on the server's clock, so the hold of a reader
/// or writer that vanished (killed, or its guard forgotten) ends after one
/// TTL, never later, and no client clock decides it.
///
/// # Writers first
///
/// Waiters queue first come, first served, and a queued writer stops the
/// readers who come after it: a stream of readers cannot starve a writer.
/// When the writer releases, every reader queued before the next writer
/// may go in at once (they are woken together). A waiting writer goes in
/// once the readers before it have released. A release wakes the waiters
/// at once rather than at their next backoff.
///
/// A thread that holds the lock (through this locker or a clone) and asks
/// for the write, or holds the write and asks for a read, could only wait
/// for itself: it gets [`Error::AlreadyHeld`] at once. A read under its own
/// read is let in, but waits behind a writer queued meanwhile, which waits
/// for the first read: do not take a second read hold in one thread (as
/// with `std::sync::RwLock`).
///
/// A writer that wants to read what it wrote, with no other writer in
/// between, turns its write hold into a read hold with
/// [`Guard::downgrade`] (one script: the rules above apply to it as to a
/// writer's release, its read hold there first).
///
/// So a reader that vanished keeps writers out until its hold expires (one
/// TTL), and a writer waiting meanwhile keeps new readers out as well, as a
/// vanished holder of a mutex keeps everyone out. A release that frees the
/// lock hands it at once to a writer at the head of the queue, as a mutex
/// does; when readers are first, it wakes them and each takes its own
/// hold.
///
/// Readers of one name over many lockers are counted in one set, which
/// every writer's attempt and every reader's release read: a lock read by
/// hundreds at once costs as many steps in those scripts. A read hold
/// counts only while it is in that set: when the set is lost (evicted under
/// memory pressure, say) while the hold's own key stays, writers no longer
/// see the hold, and its next renewal, or its release
/// ([`Guard::unlock`] returns [`Error::Lost`]), says
/// it was lost.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let config = locker.rwlock("config")?;
/// {
///     let read = config.read()?; // many hosts may read at once
///     println!("reading under token {}", read.fencing_token());
/// }
/// let write = config.write()?; // no reader and no other writer now
/// println!("writing under token {}", write.fencing_token());
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct RwLock {
    locker: Locker,
    name: String,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl RwLock {
    /// Checks the name; nothing is sent to Redis.
    pub(crate) fn new(locker: Locker, name: &str) -> Result<RwLock, Error> {
        keys::validate_key(name)?;
        locker.single_source("read-write locks")?;
        Ok(RwLock {
            locker,
            name: name.to_owned(),
        })
    }

    /// Blocks until a read hold is ours (no writer holds the lock or is
    /// queued before us), or until the builder's `acquire_timeout` passes
    /// (by default it never does), like [`Locker::lock`].
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`]: [`Error::Timeout`], [`Error::Redis`],
    /// [`Error::Pool`], [`Error::Thread`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let read = locker.rwlock("config")?.read()?;
    /// # drop(read);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn read(&self) -> Result<Guard, Error> {
        self.hold(true, self.default_wait(), None)
    }

    /// Like [`read`](RwLock::read), but waits at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`read`](RwLock::read); [`Error::InvalidInput`] as well when
    /// `wait` is above [`MAX_TTL`](crate::MAX_TTL).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// match locker.rwlock("config")?.read_timeout(Duration::from_secs(5)) {
    ///     Ok(_read) => println!("reading"),
    ///     Err(e) if e.is_timeout() => println!("a writer is at it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn read_timeout(&self, wait: Duration) -> Result<Guard, Error> {
        validate_wait("wait", wait)?;
        self.hold(true, Some(wait), None)
    }

    /// Like [`read`](RwLock::read) (waiting at most `wait` when given), but
    /// gives up once `stop` is true, as [`Locker::lock_or_stop`] does.
    ///
    /// # Errors
    ///
    /// As [`read_timeout`](RwLock::read_timeout); [`Error::Cancelled`] once
    /// `stop` is seen true.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::sync::atomic::AtomicBool;
    /// static STOP: AtomicBool = AtomicBool::new(false);
    /// let read = locker.rwlock("config")?.read_or_stop(None, &STOP)?;
    /// # drop(read);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn read_or_stop(&self, wait: Option<Duration>, stop: &AtomicBool) -> Result<Guard, Error> {
        self.hold(true, self.locker.wait_or_default(wait)?, Some(stop))
    }

    /// One attempt at a read hold: `None` when a writer holds the lock or
    /// is queued. One round trip; never waits.
    ///
    /// # Errors
    ///
    /// As [`read`](RwLock::read), without [`Error::Timeout`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// if let Some(_read) = locker.rwlock("config")?.try_read()? {
    ///     println!("reading");
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn try_read(&self) -> Result<Option<Guard>, Error> {
        self.try_hold(true)
    }

    /// Blocks until the write hold is ours (no reader, no other writer, and
    /// nobody queued before us), or until the builder's `acquire_timeout`
    /// passes, like [`Locker::lock`]. Readers who come while we wait wait
    /// behind us.
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`]: [`Error::Timeout`], [`Error::Redis`],
    /// [`Error::Pool`], [`Error::Thread`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let write = locker.rwlock("config")?.write()?;
    /// # drop(write);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn write(&self) -> Result<Guard, Error> {
        self.hold(false, self.default_wait(), None)
    }

    /// Like [`write`](RwLock::write), but waits at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`write`](RwLock::write); [`Error::InvalidInput`] as well when
    /// `wait` is above [`MAX_TTL`](crate::MAX_TTL).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let write = locker.rwlock("config")?.write_timeout(Duration::from_secs(5))?;
    /// # drop(write);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn write_timeout(&self, wait: Duration) -> Result<Guard, Error> {
        validate_wait("wait", wait)?;
        self.hold(false, Some(wait), None)
    }

    /// Like [`write`](RwLock::write) (waiting at most `wait` when given),
    /// but gives up once `stop` is true, as [`Locker::lock_or_stop`] does.
    ///
    /// # Errors
    ///
    /// As [`write_timeout`](RwLock::write_timeout); [`Error::Cancelled`]
    /// once `stop` is seen true.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::sync::atomic::AtomicBool;
    /// static STOP: AtomicBool = AtomicBool::new(false);
    /// let write = locker.rwlock("config")?.write_or_stop(None, &STOP)?;
    /// # drop(write);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn write_or_stop(&self, wait: Option<Duration>, stop: &AtomicBool) -> Result<Guard, Error> {
        self.hold(false, self.locker.wait_or_default(wait)?, Some(stop))
    }

    /// One attempt at the write hold: `None` when anyone holds the lock or
    /// is queued for it. One round trip; never waits.
    ///
    /// # Errors
    ///
    /// As [`write`](RwLock::write), without [`Error::Timeout`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// if let Some(_write) = locker.rwlock("config")?.try_write()? {
    ///     println!("writing");
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn try_write(&self) -> Result<Option<Guard>, Error> {
        self.try_hold(false)
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// assert_eq!(locker.rwlock("config")?.name(), "config");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    fn default_wait(&self) -> Option<Duration> {
        self.locker.shared().config.acquire_timeout
    }

    fn try_hold(&self, read: bool) -> Result<Option<Guard>, Error> {
        let acquisition = self.locker.shared().prepare_rw(&self.name, read)?;
        self.locker.try_acquisition(acquisition)
    }

    fn hold(
        &self,
        read: bool,
        wait: Option<Duration>,
        stop: Option<&AtomicBool>,
    ) -> Result<Guard, Error> {
        let acquisition = self.locker.shared().prepare_rw(&self.name, read)?;
        self.locker.wait_for(acquisition, wait, stop)
    }
}
