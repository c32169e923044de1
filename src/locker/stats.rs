//! `Locker`'s live figures: reading and resetting them (what they count is
//! in `stats/`, where they are recorded).

use crate::stats::Stats;

use super::Locker;

impl Locker {
    /// This locker's live figures: counts of grants, hand-overs, busy
    /// answers, timeouts, losses by reason and failed renewals, and wait
    /// and hold time quantiles, since it was built or its last
    /// [`reset_stats`](Locker::reset_stats). Shared by its clones and the
    /// [`Semaphore`](crate::Semaphore)s and [`RwLock`](crate::RwLock)s
    /// made from them. Reads a few hundred atomics; sends nothing. See [`Stats`](crate::Stats) for what each
    /// figure counts and how to export them.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let s = locker.stats();
    /// println!("{} grants, wait p99 {:?}", s.grants(), s.wait().p99());
    /// println!("{s}"); // every figure on one line
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.shared.stats.read()
    }

    /// Returns this locker's figures, as [`stats`](Locker::stats) does, and
    /// starts them again from zero, for every clone and primitive that
    /// shares them. Each count is read and cleared in one atomic step, so
    /// no event is lost between the read and the reset (one in flight may
    /// fall on either side, its wait or hold time apart from its count).
    /// For metrics systems that want each interval's figures; those that
    /// compute rates from growing counters (Prometheus) want
    /// [`stats`](Locker::stats) and no reset.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let last_minute = locker.reset_stats();
    /// println!("{} grants in the last {:?}", last_minute.grants(), last_minute.elapsed());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn reset_stats(&self) -> Stats {
        self.shared.stats.reset()
    }
}
