//! With the `metrics` feature: the recorder's events reported to the
//! `metrics` facade as they happen, to whatever recorder the application
//! installed (none installed: the facade's no-op, an atomic load).
//!
//! Every metric is labelled `prefix` (the locker's, `""` without one) and
//! `kind` (lock, permit, read, write, leader), never the key: keys can be
//! unbounded, and a metric per key would grow the exporter without end.
//! The keys are built once per locker, so an event costs the recorder's
//! lookup of a key it already has, and no allocation here.

use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, Unit};

use super::kind::{Kind, Loss};

/// What an event is said to come from (`redmutex::stats`).
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

const GRANTS: &str = "redmutex_grants_total";
const HANDOVERS: &str = "redmutex_handovers_total";
const TIMEOUTS: &str = "redmutex_timeouts_total";
const LOSSES: &str = "redmutex_losses_total";
const RENEWALS_FAILED: &str = "redmutex_renewals_failed_total";
const WAIT: &str = "redmutex_wait_seconds";
const HOLD: &str = "redmutex_hold_seconds";

/// The keys of one kind's metrics.
struct Keys {
    grants: Key,
    handovers: Key,
    timeouts: Key,
    /// By reason: expired, not ours, broken.
    losses: [Key; 3],
    renewals_failed: Key,
    wait: Key,
    hold: Key,
}

/// A locker's metrics, per kind.
pub(super) struct Export {
    kinds: [Keys; 5],
}

impl Export {
    /// The keys of a locker with `prefix`, and the metrics described to
    /// the recorder installed now (if any).
    pub(super) fn new(prefix: Option<&str>) -> Export {
        describe();
        let prefix = prefix.unwrap_or("").to_owned();
        let keys = |kind: Kind| {
            let labels = |extra: Option<&'static str>| {
                let mut l = vec![
                    Label::new("prefix", prefix.clone()),
                    Label::new("kind", kind.as_str()),
                ];
                l.extend(extra.map(|reason| Label::new("reason", reason)));
                l
            };
            let key = |name: &'static str| Key::from_parts(name, labels(None));
            let loss = |reason| Key::from_parts(LOSSES, labels(Some(reason)));
            Keys {
                grants: key(GRANTS),
                handovers: key(HANDOVERS),
                timeouts: key(TIMEOUTS),
                losses: [loss("expired"), loss("not_ours"), loss("broken")],
                renewals_failed: key(RENEWALS_FAILED),
                wait: key(WAIT),
                hold: key(HOLD),
            }
        };
        Export {
            kinds: Kind::ALL.map(keys),
        }
    }

    fn of(&self, kind: Kind) -> &Keys {
        // `Kind::ALL` is in the order of its variants.
        let [lock, permit, read, write, leader] = &self.kinds;
        match kind {
            Kind::Lock => lock,
            Kind::Permit => permit,
            Kind::Read => read,
            Kind::Write => write,
            Kind::Leader => leader,
        }
    }

    pub(super) fn granted(&self, kind: Kind, wait: Duration, handed: bool) {
        let k = self.of(kind);
        metrics::with_recorder(|r| {
            r.register_counter(&k.grants, &METADATA).increment(1);
            if handed {
                r.register_counter(&k.handovers, &METADATA).increment(1);
            }
            r.register_histogram(&k.wait, &METADATA)
                .record(wait.as_secs_f64());
        });
    }

    pub(super) fn timed_out(&self, kind: Kind) {
        count(&self.of(kind).timeouts);
    }

    pub(super) fn lost(&self, kind: Kind, why: Loss) {
        let [expired, not_ours, broken] = &self.of(kind).losses;
        count(match why {
            Loss::Expired => expired,
            Loss::NotOurs => not_ours,
            Loss::Broken => broken,
        });
    }

    pub(super) fn renewal_failed(&self, kind: Kind) {
        count(&self.of(kind).renewals_failed);
    }

    pub(super) fn ended(&self, kind: Kind, held: Duration) {
        let k = self.of(kind);
        metrics::with_recorder(|r| {
            r.register_histogram(&k.hold, &METADATA)
                .record(held.as_secs_f64());
        });
    }
}

/// Adds one to the counter `key`.
fn count(key: &Key) {
    metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
}

/// Tells the recorder installed now what each metric is (its `# HELP`
/// line in Prometheus), once per locker built: a recorder installed
/// later still gets the figures, without the descriptions.
fn describe() {
    metrics::with_recorder(|r| {
        let counters = [
            (GRANTS, "guards handed to callers, hand-overs included"),
            (HANDOVERS, "grants a release handed over to a waiter"),
            (TIMEOUTS, "waiting calls that timed out"),
            (LOSSES, "leases lost, by reason: expired, not_ours, broken"),
            (
                RENEWALS_FAILED,
                "renewals that got an error or no answer in time",
            ),
        ];
        for (name, help) in counters {
            r.describe_counter(name.into(), Some(Unit::Count), help.into());
        }
        let histograms = [
            (WAIT, "how long callers waited for their grants"),
            (HOLD, "how long guards were held"),
        ];
        for (name, help) in histograms {
            r.describe_histogram(name.into(), Some(Unit::Seconds), help.into());
        }
    });
}
