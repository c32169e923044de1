//! The recorder behind `Stats`: relaxed atomic counters and two fixed
//! log-scale histograms, recorded without a lock and read without stopping
//! anyone.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

pub(crate) use super::kind::{Kind, Kinded, Loss};
use super::{Durations, Stats};

/// Sub-buckets per power of two: 2^SUB_BITS.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Values below SUB have a bucket each; then SUB per power of two up to 2^64.
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

/// The bucket of `v` microseconds.
fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return usize::try_from(v).unwrap_or(0);
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = usize::try_from((v >> (e - SUB_BITS)) & (SUB as u64 - 1)).unwrap_or(0);
    let power = usize::try_from(e - SUB_BITS).unwrap_or(0);
    SUB + power * SUB + sub
}

/// The largest value of bucket `i`.
pub(super) fn bucket_top(i: usize) -> u64 {
    if i < SUB {
        return i as u64;
    }
    let k = i - SUB;
    let e = u32::try_from(k / SUB).unwrap_or(0) + SUB_BITS;
    let width = 1u64 << (e - SUB_BITS);
    let low = (1u64 << e).saturating_add((k % SUB) as u64 * width);
    low.saturating_add(width - 1)
}

/// Durations as they are recorded: a bucket count each, and the largest.
struct Histogram {
    buckets: Box<[AtomicU64]>,
    max_us: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_us: AtomicU64::new(0),
        }
    }

    fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        if let Some(b) = self.buckets.get(bucket_of(us)) {
            b.fetch_add(1, Relaxed);
        }
        self.max_us.fetch_max(us, Relaxed);
    }

    /// The figures so far; cleared as they are read when `clear`.
    fn read(&self, clear: bool) -> Durations {
        let take = |a: &AtomicU64| {
            if clear {
                a.swap(0, Relaxed)
            } else {
                a.load(Relaxed)
            }
        };
        let buckets: Vec<u64> = self.buckets.iter().map(take).collect();
        let count = buckets.iter().fold(0u64, |n, b| n.saturating_add(*b));
        Durations {
            buckets: if count == 0 { Vec::new() } else { buckets },
            count,
            max_us: take(&self.max_us),
        }
    }
}

/// A locker's figures as they are recorded, shared by its clones and
/// guards: relaxed atomic adds, no lock. Off (with `Builder::stats(false)`)
/// it records nothing. With the `metrics` feature, each event is reported
/// to the `metrics` facade too (see `export.rs`), as long as it is on.
pub(crate) struct Recorder {
    on: bool,
    #[cfg(feature = "metrics")]
    export: super::export::Export,
    /// The figures count from `base` plus `since_us`.
    base: Instant,
    since_us: AtomicU64,
    grants: AtomicU64,
    hand_overs: AtomicU64,
    busy: AtomicU64,
    timeouts: AtomicU64,
    losses_expired: AtomicU64,
    losses_not_ours: AtomicU64,
    losses_broken: AtomicU64,
    failed_renewals: AtomicU64,
    wait: Histogram,
    hold: Histogram,
}

// Without the `metrics` feature, what an event is of (`of`) goes unused:
// nothing asks its kind.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
impl Recorder {
    /// A recorder, recording when `on`, for a locker with `prefix` (the
    /// metrics' `prefix` label).
    pub(crate) fn new(on: bool, prefix: Option<&str>) -> Self {
        Recorder {
            on,
            #[cfg(feature = "metrics")]
            export: super::export::Export::new(prefix),
            base: Instant::now(),
            since_us: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            hand_overs: AtomicU64::new(0),
            busy: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            losses_expired: AtomicU64::new(0),
            losses_not_ours: AtomicU64::new(0),
            losses_broken: AtomicU64::new(0),
            failed_renewals: AtomicU64::new(0),
            wait: Histogram::new(),
            hold: Histogram::new(),
        }
    }

    /// A guard of `of` handed to a caller who asked at `asked`; `handed`:
    /// by a hand-over.
    pub(crate) fn granted(&self, of: &impl Kinded, asked: Instant, handed: bool) {
        if self.on {
            self.grants.fetch_add(1, Relaxed);
            if handed {
                self.hand_overs.fetch_add(1, Relaxed);
            }
            let wait = asked.elapsed();
            self.wait.record(wait);
            #[cfg(feature = "metrics")]
            self.export.granted(of.kind(), wait, handed);
        }
    }

    /// A one-attempt call found the lock held.
    pub(crate) fn busy(&self) {
        if self.on {
            self.busy.fetch_add(1, Relaxed);
        }
    }

    /// A waiting call for `of` timed out.
    pub(crate) fn timed_out(&self, of: &impl Kinded) {
        if self.on {
            self.timeouts.fetch_add(1, Relaxed);
            #[cfg(feature = "metrics")]
            self.export.timed_out(of.kind());
        }
    }

    /// The lease of a guard of `of` was lost (counted once per guard by
    /// the caller).
    pub(crate) fn lost(&self, of: &impl Kinded, why: Loss) {
        if self.on {
            match why {
                Loss::Expired => self.losses_expired.fetch_add(1, Relaxed),
                Loss::NotOurs => self.losses_not_ours.fetch_add(1, Relaxed),
                Loss::Broken => self.losses_broken.fetch_add(1, Relaxed),
            };
            #[cfg(feature = "metrics")]
            self.export.lost(of.kind(), why);
        }
    }

    /// A renewal of a guard of `of` got an error or no answer.
    pub(crate) fn renewal_failed(&self, of: &impl Kinded) {
        if self.on {
            self.failed_renewals.fetch_add(1, Relaxed);
            #[cfg(feature = "metrics")]
            self.export.renewal_failed(of.kind());
        }
    }

    /// A guard of `of` granted at `since` ended.
    pub(crate) fn ended(&self, of: &impl Kinded, since: Instant) {
        if self.on {
            let held = since.elapsed();
            self.hold.record(held);
            #[cfg(feature = "metrics")]
            self.export.ended(of.kind(), held);
        }
    }

    /// The figures so far.
    pub(crate) fn read(&self) -> Stats {
        self.snapshot(false)
    }

    /// The figures so far, cleared as they are read: each count is taken
    /// and zeroed in one atomic step, so no event is lost or counted twice.
    pub(crate) fn reset(&self) -> Stats {
        self.snapshot(true)
    }

    fn snapshot(&self, clear: bool) -> Stats {
        let take = |a: &AtomicU64| {
            if clear {
                a.swap(0, Relaxed)
            } else {
                a.load(Relaxed)
            }
        };
        let now_us = u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX);
        let since = if clear {
            self.since_us.swap(now_us, Relaxed)
        } else {
            self.since_us.load(Relaxed)
        };
        Stats {
            elapsed: Duration::from_micros(now_us.saturating_sub(since)),
            grants: take(&self.grants),
            hand_overs: take(&self.hand_overs),
            busy: take(&self.busy),
            timeouts: take(&self.timeouts),
            losses_expired: take(&self.losses_expired),
            losses_not_ours: take(&self.losses_not_ours),
            losses_broken: take(&self.losses_broken),
            failed_renewals: take(&self.failed_renewals),
            wait: self.wait.read(clear),
            hold: self.hold.read(clear),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(7), 7);
        assert_eq!(bucket_of(8), 8);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_top(BUCKETS - 1), u64::MAX);
        // Each bucket's top is the value just below the next bucket.
        for i in 0..BUCKETS - 1 {
            let top = bucket_top(i);
            assert_eq!(bucket_of(top), i, "top of {i}");
            assert_eq!(bucket_of(top + 1), i + 1, "after the top of {i}");
        }
    }

    #[test]
    fn a_bucket_is_at_most_an_eighth_wide() {
        for v in [8u64, 9, 100, 1_000, 12_345, 1 << 40, u64::MAX / 3] {
            let top = bucket_top(bucket_of(v));
            assert!(top >= v);
            assert!((top - v) as f64 <= v as f64 / 8.0, "{v}: top {top}");
        }
    }

    #[test]
    fn quantiles_are_within_the_resolution_and_max_is_exact() {
        let r = Recorder::new(true, None);
        for us in 1..=1000u64 {
            r.ended(&Kind::Lock, Instant::now() - Duration::from_micros(us));
        }
        let hold = r.read().hold;
        assert_eq!(hold.count(), 1000);
        let within = |got: Duration, want_us: u64| {
            let got = got.as_micros() as f64;
            let want = want_us as f64;
            // The clock read after `now` adds a little to every sample.
            got >= want && got <= want * 1.125 + 50.0
        };
        assert!(within(hold.p50(), 500), "{hold:?}");
        assert!(within(hold.p99(), 990), "{hold:?}");
        assert!(hold.max() >= Duration::from_micros(1000));
        assert!(hold.max() <= hold.quantile(1.0).max(hold.max()));
        assert!(hold.quantile(0.0) <= hold.p50());
    }

    #[test]
    fn exact_below_eight_microseconds() {
        let h = Histogram::new();
        for us in [1u64, 3, 3, 7] {
            h.record(Duration::from_micros(us));
        }
        let d = h.read(false);
        assert_eq!(d.p50(), Duration::from_micros(3));
        assert_eq!(d.quantile(0.25), Duration::from_micros(1));
        assert_eq!(d.max(), Duration::from_micros(7));
        assert_eq!(d.quantile(f64::NAN), Duration::from_micros(1));
    }

    /// What recording adds to one lock + unlock cycle, measured alone (a
    /// cycle's round trips make the difference too small to see against
    /// the noise of a loaded machine): the clock reads and atomic adds of
    /// a grant and of its guard's end; with the `metrics` feature, then
    /// again reported to a Prometheus recorder. A measurement, not a check:
    /// `cargo test --release --lib recording_cost -- --ignored --nocapture`
    /// (`--features metrics` for the second part).
    #[test]
    #[ignore = "a measurement; run it alone, in release"]
    fn recording_cost() {
        measure_recording();
        // With the `metrics` feature, reported to a Prometheus recorder (on
        // this thread only) as well.
        #[cfg(feature = "metrics")]
        {
            let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
            println!("reported to a Prometheus recorder:");
            metrics::with_local_recorder(&prometheus, measure_recording);
        }
    }

    fn measure_recording() {
        const N: u32 = 2_000_000;
        for on in [true, false, true, false] {
            let r = Recorder::new(on, None);
            let start = Instant::now();
            for _ in 0..N {
                let asked = Instant::now(); // the call's start
                let since = Instant::now(); // the guard's grant
                r.granted(&Kind::Lock, std::hint::black_box(asked), false);
                r.ended(&Kind::Lock, std::hint::black_box(since));
            }
            let per = start.elapsed() / N;
            println!(
                "recording {}: {per:?} per lock + unlock cycle",
                if on { "on" } else { "off" }
            );
        }
    }

    #[test]
    fn reset_returns_what_it_clears_and_off_records_nothing() {
        let r = Recorder::new(true, None);
        r.granted(&Kind::Lock, Instant::now(), true);
        r.busy();
        r.lost(&Kind::Lock, Loss::Expired);
        let cleared = r.reset();
        assert_eq!((cleared.grants(), cleared.hand_overs()), (1, 1));
        assert_eq!((cleared.busy(), cleared.losses_expired()), (1, 1));
        assert_eq!(cleared.wait().count(), 1);
        let after = r.read();
        assert_eq!(
            after,
            Stats {
                elapsed: after.elapsed,
                ..Stats::default()
            }
        );

        let off = Recorder::new(false, None);
        off.granted(&Kind::Lock, Instant::now(), false);
        off.renewal_failed(&Kind::Lock);
        off.ended(&Kind::Lock, Instant::now());
        let s = off.read();
        assert_eq!(
            (s.grants(), s.failed_renewals(), s.hold().count()),
            (0, 0, 0)
        );
        assert_eq!(s.wait().p99(), Duration::ZERO);
    }
}
