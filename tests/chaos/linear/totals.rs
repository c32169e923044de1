//! The workloads' figures over every scenario, as the report prints them
//! (and `RELIABILITY.md` lists).

use std::time::Duration;

use redmutex_testkit::linear::Verdict;

use super::check::RegisterCheck;
use super::Checks;

/// One register workload over every scenario.
#[derive(Default)]
struct Register {
    histories: usize,
    ops: usize,
    unknown: usize,
    refused: usize,
    /// Histories found not linearizable.
    anomalies: usize,
    /// Histories whose search gave up.
    gave_up: usize,
    steps: u64,
    took: Duration,
}

impl Register {
    fn add(&mut self, c: &RegisterCheck) {
        self.histories += 1;
        self.ops += c.ops;
        self.unknown += c.unknown;
        self.refused += c.refused;
        self.anomalies += c.anomalies();
        self.gave_up += usize::from(c.checked.verdict == Verdict::GaveUp);
        self.steps += c.checked.steps;
        self.took += c.took;
    }

    fn row(&self, what: &str) -> String {
        format!(
            "| {what} | {} | {} | {} | {} | {} | {} | {:.0} ms |\n",
            self.histories,
            self.ops,
            self.unknown,
            self.refused,
            self.anomalies,
            self.gave_up,
            self.took.as_secs_f64() * 1e3
        )
    }
}

/// The workloads over every scenario.
#[derive(Default)]
pub struct Totals {
    guarded: Register,
    control: Register,
    sets: usize,
    adds: usize,
    acknowledged: usize,
    refused: usize,
    unknown: usize,
    recovered: usize,
    present: usize,
    set_anomalies: usize,
    set_took: Duration,
    /// The scenarios whose control register showed an anomaly, and the
    /// first such anomaly's operations.
    tripped: Vec<String>,
    example: Option<(String, String)>,
}

impl Totals {
    pub fn add(&mut self, scenario: &str, c: &Checks) {
        if let Some(g) = &c.guarded {
            self.guarded.add(g);
        }
        if let Some(k) = &c.control {
            self.control.add(k);
            if let Some((_, text)) = &k.excerpt {
                self.tripped.push(scenario.to_owned());
                if self.example.is_none() {
                    self.example = Some((scenario.to_owned(), text.clone()));
                }
            }
        }
        if let Some(s) = &c.set {
            let r = &s.report;
            self.sets += 1;
            self.adds += r.acknowledged + r.refused + r.unknown;
            self.acknowledged += r.acknowledged;
            self.refused += r.refused;
            self.unknown += r.unknown;
            self.recovered += r.recovered;
            self.present += r.present;
            self.set_anomalies += r.anomalies();
            self.set_took += s.took;
        }
    }

    /// The report's section (empty when no scenario ran the workloads).
    pub fn report(&self) -> String {
        if self.sets == 0 {
            return String::new();
        }
        let mut s = String::from(
            "\n| linearizability workload | histories | operations | unknown outcome | writes refused (left out) | anomalies | search gave up | checker time |\n|---|---|---|---|---|---|---|---|\n",
        );
        s += &self
            .guarded
            .row("register written through `Guard::run_if_held`");
        s += &format!(
            "| set written through `fence::admit_and_run` (adds) | {} | {} | {} | {} | {} | 0 | {:.0} ms |\n",
            self.sets,
            self.adds,
            self.unknown,
            self.refused,
            self.set_anomalies,
            self.set_took.as_secs_f64() * 1e3
        );
        s += &self
            .control
            .row("control: the register written with a plain `SET`");
        s += &format!(
            "\nSet: {} adds acknowledged, {} refused by the fence, {} unknown ({} of them present), {} elements present at the end. Register histories: {} search steps in all. The control register was not linearizable in {} of its {} histories{}.\n",
            self.acknowledged,
            self.refused,
            self.unknown,
            self.recovered,
            self.present,
            self.guarded.steps + self.control.steps,
            self.control.anomalies,
            self.control.histories,
            if self.tripped.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.tripped.join("; "))
            }
        );
        if let Some((scenario, text)) = &self.example {
            s += &format!(
                "\nThe control's first anomaly ({scenario}): `*` the operation no order could explain, `>` the writes of the value it read and the other writes from the same value (a write from a value already overwritten: a lost update), times in ms against its completion:\n\n```\n{text}```\n"
            );
        }
        s
    }
}
