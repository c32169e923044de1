//! `Stats`: a locker's live figures as callers read them, and `Durations`,
//! their wait and hold times. The recorder behind them (atomic counters and
//! two fixed log-scale histograms) is in [`recorder`]; with the `metrics`
//! feature, `export.rs` reports each event to the `metrics` facade too.

#[cfg(feature = "metrics")]
mod export;
mod kind;
pub(crate) mod recorder;

use std::fmt;
use std::time::Duration;

use recorder::bucket_top;

/// A locker's figures since it was built, or since its last
/// [`Locker::reset_stats`](crate::Locker::reset_stats), from
/// [`Locker::stats`](crate::Locker::stats).
///
/// One set of figures per locker built: its clones, and every
/// [`Semaphore`](crate::Semaphore) and [`RwLock`](crate::RwLock) made from
/// it or its clones, add to the same counts (a permit or a read or write
/// hold is a grant like a lock). A locker built separately, in this
/// process or another, has its own.
///
/// Recording costs a few relaxed atomic adds per operation and no lock;
/// [`Builder::stats(false)`](crate::Builder::stats) turns it off (every
/// figure then stays zero).
///
/// # What is counted
///
/// - [`grants`](Stats::grants): guards handed to callers (every lock,
///   try-lock, permit, read or write hold), hand-overs included;
/// - [`hand_overs`](Stats::hand_overs): those grants that a release handed
///   to a waiter of this locker, taken up as such (counted on the waiter's
///   side, when its call returns the guard, before its watchdog's take-up:
///   a take-up that then fails counts as a loss; a permit handed over, or
///   any hand-over with
///   [`Builder::min_replicas`](crate::Builder::min_replicas), is taken by
///   the waiter's next attempt and counts as a plain grant);
/// - [`busy`](Stats::busy): one-attempt calls (`try_lock`, `try_lock_all`,
///   `try_acquire`, `try_read`, `try_write`) that found the lock held;
/// - [`timeouts`](Stats::timeouts): waiting calls that returned
///   [`Error::Timeout`](crate::Error::Timeout);
/// - [`losses`](Stats::losses): guards whose lease was lost, once each, by
///   reason: [`losses_expired`](Stats::losses_expired) (its deadline passed
///   without a confirmed renewal) and
///   [`losses_not_ours`](Stats::losses_not_ours) (Redis showed the key gone
///   or someone else's) and [`losses_broken`](Stats::losses_broken) (an
///   operator broke the hold with [`Locker::break_lock`](crate::Locker::break_lock)). A loss is counted when a renewal (the watchdog's,
///   or [`extend`](crate::Guard::extend)) or a call of the holder's
///   ([`run_if_held`](crate::Guard::run_if_held),
///   [`Leadership::proclaim`](crate::Leadership::proclaim)) finds it, or
///   else when its guard ends and finds it (a release that finds its keys
///   gone, or `unlock` or `expire_at` that find the lease lost): a lease
///   that ran out while its renewals failed, or without a watchdog, is
///   counted then;
/// - [`failed_renewals`](Stats::failed_renewals): renewals (the
///   watchdog's, each retry counted, and `extend`'s) that got an error or
///   no answer in time;
/// - [`wait`](Stats::wait): per grant, from the call to its guard (a
///   one-attempt call's round trip, a waiting call's whole wait);
/// - [`hold`](Stats::hold): per guard ended (unlock, drop, `expire_at`),
///   from its grant to its end.
///
/// # Exporting them
///
/// With the `metrics` cargo feature (off by default), every event is also
/// reported as it happens to the [`metrics`](https://docs.rs/metrics)
/// facade, the ecosystem's metrics API (as `log` is for logging), so any
/// exporter installed as its recorder gets them (Prometheus, StatsD,
/// OpenTelemetry): counters `redmutex_grants_total`,
/// `redmutex_handovers_total`, `redmutex_timeouts_total`,
/// `redmutex_losses_total` (label `reason`: `expired`, `not_ours`,
/// `broken`) and `redmutex_renewals_failed_total`; histograms
/// `redmutex_wait_seconds` and `redmutex_hold_seconds`, in seconds. Each
/// is labelled `prefix` (the locker's, `""` without one) and `kind`
/// (`lock`, `permit`, `read`, `write`, `leader`), never by key: lock names
/// can be unbounded, and so would the series be. They count what these
/// figures count (busy answers apart), so they agree with
/// [`Locker::stats`](crate::Locker::stats), and go quiet with
/// [`Builder::stats(false)`](crate::Builder::stats). Install the recorder
/// before building the locker for its `# HELP` lines (the figures reach
/// one installed later too). Without the feature, none of this is
/// compiled. `cargo run --example metrics --features metrics` prints the
/// Prometheus scrape text of a short workload.
///
/// ```no_run
/// # #[cfg(feature = "metrics")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // With `metrics-exporter-prometheus`, or any `metrics` recorder.
/// let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
/// let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// locker.lock("report")?.unlock()?;
/// // redmutex_grants_total{prefix="",kind="lock"} 1 ...
/// println!("{}", handle.render());
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "metrics"))]
/// # fn main() {}
/// ```
///
/// Without it, read them from a thread of your own, every few seconds, and hand them
/// to your metrics system: the counts as monotonic counters (they only
/// grow while you do not reset), the quantiles as gauges. With
/// Prometheus-like systems, which compute rates themselves, never reset;
/// with systems that want each interval's figures (StatsD, a log line per
/// minute), call [`Locker::reset_stats`](crate::Locker::reset_stats)
/// instead of `stats`: it returns the figures it clears, so no event falls
/// between a read and a reset. `cargo run --example stats` prints them
/// every second under load.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// use std::time::Duration;
/// let exporter = locker.clone();
/// std::thread::spawn(move || loop {
///     std::thread::sleep(Duration::from_secs(10));
///     let s = exporter.stats();
///     // e.g. counter!("redmutex_grants_total").absolute(s.grants());
///     //      gauge!("redmutex_wait_p99_seconds").set(s.wait().p99().as_secs_f64());
///     println!("grants {} busy {} wait p99 {:?}", s.grants(), s.busy(), s.wait().p99());
/// });
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Stats {
    elapsed: Duration,
    grants: u64,
    hand_overs: u64,
    busy: u64,
    timeouts: u64,
    losses_expired: u64,
    losses_not_ours: u64,
    losses_broken: u64,
    failed_renewals: u64,
    wait: Durations,
    hold: Durations,
}

impl Stats {
    /// How long these figures cover: since the locker was built or its
    /// stats last reset. Divide a count by it for a rate.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let s = locker.stats();
    /// println!("{:.1} grants/s", s.grants() as f64 / s.elapsed().as_secs_f64());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Guards handed to callers, hand-overs included.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let _guard = locker.lock("k")?;
    /// assert!(locker.stats().grants() >= 1);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn grants(&self) -> u64 {
        self.grants
    }

    /// Grants that a release handed over to a waiting call of this locker
    /// (a lock's or a writer's; see "What is counted" for the others).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let s = locker.stats();
    /// println!("{} of {} grants by hand-over", s.hand_overs(), s.grants());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn hand_overs(&self) -> u64 {
        self.hand_overs
    }

    /// One-attempt calls (`try_lock` and the like) that found the lock held.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// if locker.try_lock("backup")?.is_none() {
    ///     assert!(locker.stats().busy() >= 1);
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn busy(&self) -> u64 {
        self.busy
    }

    /// Waiting calls that returned [`Error::Timeout`](crate::Error::Timeout).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("{} timeouts", locker.stats().timeouts());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn timeouts(&self) -> u64 {
        self.timeouts
    }

    /// Guards whose lease was lost, whatever the reason (the sum of the
    /// `losses_*` counts).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let s = locker.stats();
    /// if s.losses() > 0 {
    ///     eprintln!("{} leases lost ({} ran out)", s.losses(), s.losses_expired());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn losses(&self) -> u64 {
        self.losses_expired
            .saturating_add(self.losses_not_ours)
            .saturating_add(self.losses_broken)
    }

    /// Leases lost because their deadline passed without a confirmed
    /// renewal (renewals failing, a paused process, no watchdog).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("{} leases ran out", locker.stats().losses_expired());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn losses_expired(&self) -> u64 {
        self.losses_expired
    }

    /// Leases lost because Redis showed the key gone, someone else's, or
    /// of another type (deleted by hand, evicted, lost in a failover).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("{} keys found gone", locker.stats().losses_not_ours());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn losses_not_ours(&self) -> u64 {
        self.losses_not_ours
    }

    /// Leases lost because an operator broke the hold
    /// ([`Locker::break_lock`](crate::Locker::break_lock)); the guard's
    /// [`lost_reason`](crate::Guard::lost_reason) says why. Whichever
    /// finds the break counts it here: a renewal, `extend`, `run_if_held`,
    /// `proclaim`, `unlock`, `expire_at` or a resignation; only a guard
    /// dropped before any of them found it counts it in
    /// [`losses_not_ours`](Stats::losses_not_ours) (a drop reads no more
    /// than its release, to keep its bound).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("{} holds broken by an operator", locker.stats().losses_broken());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn losses_broken(&self) -> u64 {
        self.losses_broken
    }

    /// Renewals that got an error or no answer in time (each retry of the
    /// watchdog counted); the lease may still be ours.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("{} renewals failed", locker.stats().failed_renewals());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn failed_renewals(&self) -> u64 {
        self.failed_renewals
    }

    /// How long callers waited for their grants: one sample per grant.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let stats = locker.stats();
    /// let wait = stats.wait();
    /// println!("wait p50 {:?} p99 {:?} max {:?}", wait.p50(), wait.p99(), wait.max());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn wait(&self) -> &Durations {
        &self.wait
    }

    /// How long guards were held: one sample per guard ended.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("longest hold {:?}", locker.stats().hold().max());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn hold(&self) -> &Durations {
        &self.hold
    }
}

impl fmt::Debug for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stats")
            .field("elapsed", &self.elapsed)
            .field("grants", &self.grants)
            .field("hand_overs", &self.hand_overs)
            .field("busy", &self.busy)
            .field("timeouts", &self.timeouts)
            .field("losses_expired", &self.losses_expired)
            .field("losses_not_ours", &self.losses_not_ours)
            .field("losses_broken", &self.losses_broken)
            .field("failed_renewals", &self.failed_renewals)
            .field("wait", &self.wait)
            .field("hold", &self.hold)
            .finish()
    }
}

/// One line: `grants 12 (hand-overs 3), busy 1, timeouts 0, losses 0
/// (expired 0, not ours 0, broken 0), failed renewals 0, wait p50 .. p99 .. max ..,
/// hold p50 .. p99 .. max ..`.
impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "grants {} (hand-overs {}), busy {}, timeouts {}, losses {} (expired {}, not ours {}, broken {}), \
             failed renewals {}, wait {}, hold {}",
            self.grants,
            self.hand_overs,
            self.busy,
            self.timeouts,
            self.losses(),
            self.losses_expired,
            self.losses_not_ours,
            self.losses_broken,
            self.failed_renewals,
            self.wait,
            self.hold
        )
    }
}

/// Durations recorded in a fixed log-scale histogram: their count, any
/// quantile, and the largest exactly.
///
/// # Resolution
///
/// Samples are kept in microseconds, in buckets of an eighth of a power of
/// two: exact below 8 µs, and above it a quantile is reported as the top
/// of its bucket, so never below the true value and at most 12.5 % above
/// it (a p99 of 10 ms is between 8.9 and 10 ms). [`max`](Durations::max)
/// is exact (to the microsecond). The histogram has a fixed size (496
/// buckets, about 4 KiB) whatever the number of samples.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Durations {
    /// Samples per bucket (empty when there are none).
    buckets: Vec<u64>,
    count: u64,
    max_us: u64,
}

impl Durations {
    /// How many samples.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let s = locker.stats();
    /// assert_eq!(s.wait().count(), s.grants());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The median (see the type's "Resolution"); zero without samples.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("median wait {:?}", locker.stats().wait().p50());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    /// The 99th percentile (see the type's "Resolution"); zero without
    /// samples.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("p99 hold {:?}", locker.stats().hold().p99());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }

    /// The largest sample, exact to the microsecond; zero without samples.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("longest wait {:?}", locker.stats().wait().max());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn max(&self) -> Duration {
        Duration::from_micros(self.max_us)
    }

    /// The `q` quantile, `q` from 0 to 1 (clamped; NaN reads as 0): the
    /// smallest sample at or above a fraction `q` of them, to the
    /// resolution above; zero without samples.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// println!("p99.9 wait {:?}", locker.stats().wait().quantile(0.999));
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let q = if q.is_nan() { 0.0 } else { q.clamp(0.0, 1.0) };
        // The rank of the sample wanted, from 1 to count.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // in 0..=count
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (i, n) in self.buckets.iter().enumerate() {
            seen = seen.saturating_add(*n);
            if seen >= rank {
                return Duration::from_micros(bucket_top(i).min(self.max_us));
            }
        }
        self.max()
    }
}

impl fmt::Debug for Durations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Durations")
            .field("count", &self.count)
            .field("p50", &self.p50())
            .field("p99", &self.p99())
            .field("max", &self.max())
            .finish()
    }
}

/// `p50 1.2ms p99 3.4ms max 5ms (n 42)`.
impl fmt::Display for Durations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p50 {:?} p99 {:?} max {:?} (n {})",
            self.p50(),
            self.p99(),
            self.max(),
            self.count
        )
    }
}
