//! `Semaphore`: at most N holders of a name at once, each hold a `Guard`.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::config::validate_wait;
use crate::guard::Guard;
use crate::locker::Locker;
use crate::protocol::keys;
use crate::Error;

/// The most permits a semaphore may have: every attempt looks at each of
/// them, in one script.
pub const MAX_PERMITS: u32 = 1024;

/// A counting semaphore: at most `permits` holders of its name at once,
/// across every locker on the same server and prefix. Made by
/// [`Locker::semaphore`]; a cheap handle (a clone of the locker, the name
/// and the count).
///
/// Each permit is held as a [`Guard`] with the whole lease API of a lock:
/// its watchdog renews it, [`Guard::is_lost`] tells the moment it can no
/// longer be promised, and [`Guard::fencing_token`] rises with every grant
/// of the name. A permit is kept in Redis like a lock: a key with a TTL
/// on the server's clock, so the permit of a holder that vanished (killed,
/// or its guard forgotten) comes back after one TTL, never later, and no
/// client clock decides it. Waiters queue first come, first served, and a
/// release hands its permit to the first of them at once.
///
/// # The permit count
///
/// The count is not stored: every call passes its own, and permits are
/// numbered `0..count`. Callers of one name that pass different counts
/// each take only among their own first `count` permits, so at most the
/// largest count in use hold at once, and a caller with a smaller count
/// waits while its own permits are all taken. Use one count per name.
///
/// A thread that holds every permit of the count (through this locker or a
/// clone) and asks for one more could only wait for itself: it gets
/// [`Error::AlreadyHeld`] at once. With fewer, it waits for one as anyone
/// does.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// // At most four exports run at once, on every host.
/// let exports = locker.semaphore("exports", 4)?;
/// let permit = exports.acquire()?;
/// println!("exporting under token {}", permit.fencing_token());
/// drop(permit); // the next waiter gets it at once
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Semaphore {
    locker: Locker,
    name: String,
    permits: u32,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    /// Checks the name and count; nothing is sent to Redis.
    pub(crate) fn new(locker: Locker, name: &str, permits: u32) -> Result<Semaphore, Error> {
        keys::validate_key(name)?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::InvalidInput(format!(
                "a semaphore needs 1 to {MAX_PERMITS} permits, not {permits}"
            )));
        }
        locker.single_source("semaphores")?;
        Ok(Semaphore {
            locker,
            name: name.to_owned(),
            permits,
        })
    }

    /// Blocks until a permit is ours, or until the builder's
    /// `acquire_timeout` passes (by default it never does), like
    /// [`Locker::lock`].
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`]: [`Error::Timeout`], [`Error::Redis`],
    /// [`Error::Pool`], [`Error::Thread`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let permit = locker.semaphore("exports", 4)?.acquire()?;
    /// # drop(permit);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn acquire(&self) -> Result<Guard, Error> {
        let wait = self.locker.shared().config.acquire_timeout;
        self.acquire_within(wait, None)
    }

    /// Like [`acquire`](Semaphore::acquire), but waits at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Semaphore::acquire); [`Error::InvalidInput`] as well
    /// when `wait` is above [`MAX_TTL`](crate::MAX_TTL).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let exports = locker.semaphore("exports", 4)?;
    /// match exports.acquire_timeout(Duration::from_secs(5)) {
    ///     Ok(_permit) => println!("exporting"),
    ///     Err(e) if e.is_timeout() => println!("four exports are running"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn acquire_timeout(&self, wait: Duration) -> Result<Guard, Error> {
        validate_wait("wait", wait)?;
        self.acquire_within(Some(wait), None)
    }

    /// Like [`acquire`](Semaphore::acquire) (waiting at most `wait` when
    /// given), but gives up once `stop` is true, as
    /// [`Locker::lock_or_stop`] does.
    ///
    /// # Errors
    ///
    /// As [`acquire_timeout`](Semaphore::acquire_timeout);
    /// [`Error::Cancelled`] once `stop` is seen true.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::sync::atomic::AtomicBool;
    /// static STOP: AtomicBool = AtomicBool::new(false);
    /// let permit = locker.semaphore("exports", 4)?.acquire_or_stop(None, &STOP)?;
    /// # drop(permit);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn acquire_or_stop(
        &self,
        wait: Option<Duration>,
        stop: &AtomicBool,
    ) -> Result<Guard, Error> {
        let wait = self.locker.wait_or_default(wait)?;
        self.acquire_within(wait, Some(stop))
    }

    /// One attempt: a permit if one is free now and nobody is queued for
    /// one, else `None`. One round trip; never waits.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Semaphore::acquire), without [`Error::Timeout`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// if let Some(_permit) = locker.semaphore("exports", 4)?.try_acquire()? {
    ///     println!("exporting");
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "the hold lasts only while the guard lives: dropping it releases it"]
    pub fn try_acquire(&self) -> Result<Option<Guard>, Error> {
        let acquisition = self
            .locker
            .shared()
            .prepare_permit(&self.name, self.permits)?;
        self.locker.try_acquisition(acquisition)
    }

    /// How many of this semaphore's permits are free right now (a permit
    /// handed over to a waiter counts as taken). One round trip; the answer
    /// may be stale by the time it arrives.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] and [`Error::Pool`] when Redis fails or cannot be
    /// reached.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let exports = locker.semaphore("exports", 4)?;
    /// println!("{} of {} free", exports.available_permits()?, exports.permits());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn available_permits(&self) -> Result<u32, Error> {
        self.locker.shared().free_permits(&self.name, self.permits)
    }

    /// The semaphore's name.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// assert_eq!(locker.semaphore("exports", 4)?.name(), "exports");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The permit count this handle passes.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// assert_eq!(locker.semaphore("exports", 4)?.permits(), 4);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    fn acquire_within(
        &self,
        wait: Option<Duration>,
        stop: Option<&AtomicBool>,
    ) -> Result<Guard, Error> {
        let acquisition = self
            .locker
            .shared()
            .prepare_permit(&self.name, self.permits)?;
        self.locker.wait_for(acquisition, wait, stop)
    }
}
