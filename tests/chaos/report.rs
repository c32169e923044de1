//! What each scenario's run gives, and the figures over every scenario
//! that the report prints (and `RELIABILITY.md` lists).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::broken::Flaw;
use crate::history::{ms, Kind};
use crate::support::add_counts;
use crate::{Outcome, Scenario};

/// Figures per fault kind, over every scenario.
#[derive(Default)]
struct PerKind {
    injected: usize,
    /// Per master (Redlock faults on some masters only).
    per_master: BTreeMap<usize, usize>,
    violations: usize,
    excused: u64,
    loss_report: Option<u64>,
    takeover: Option<u64>,
}

#[derive(Default)]
pub(crate) struct Totals {
    acquisitions: u64,
    processes: usize,
    violations: usize,
    stale_accepted: u64,
    rejected: u64,
    excused: BTreeMap<String, u64>,
    known_before: u64,
    told_by_deadline: u64,
    starved: (u64, usize),
    kinds: BTreeMap<Kind, PerKind>,
    soak_violations: usize,
    failures: BTreeMap<String, u64>,
    clock_step: u64,
    /// Each violation with the faults and records around it, by scenario.
    explained: String,
    /// The linearizability workloads.
    linear: crate::linear::Totals,
}

impl Totals {
    pub(crate) fn add(&mut self, s: &Scenario, o: &Outcome) {
        let v = &o.verdict;
        if !v.violations.is_empty() {
            self.explained += &format!("\n### {}\n\n", s.name);
            if let Some(kept) = &o.kept {
                self.explained += &format!("History kept in `{}`.\n\n", kept.display());
            }
            for (v, why) in v.violations.iter().zip(&o.explained) {
                self.explained += &format!("- {v}\n");
                if !why.is_empty() {
                    self.explained += &format!("\n```\n{why}```\n");
                }
            }
        }
        self.linear.add(&s.name, &o.linear);
        self.acquisitions += v.acquisitions;
        self.processes += o.processes;
        self.violations += v.violations.len();
        self.stale_accepted += v.stale_accepted;
        self.rejected += o.rejected;
        self.known_before += v.known_before;
        self.told_by_deadline += v.told_by_deadline;
        self.starved.0 += v.starved_landed;
        self.starved.1 += o.not_landed;
        for (why, n) in &v.excused {
            *self.excused.entry(why.clone()).or_default() += n;
        }
        for e in &o.events {
            let k = self.kinds.entry(e.kind).or_default();
            k.injected += 1;
            for m in &e.masters {
                *k.per_master.entry(*m).or_default() += 1;
            }
            if matches!(e.kind, Kind::StarvePool | Kind::StarveCut) {
                self.starved.1 += 1;
            }
        }
        for (kind, t) in &v.loss_report {
            let k = self.kinds.entry(*kind).or_default();
            k.loss_report = k.loss_report.max(Some(*t));
        }
        for (kind, t) in &v.takeover {
            let k = self.kinds.entry(*kind).or_default();
            k.takeover = k.takeover.max(Some(*t));
        }
        if s.soak.is_some() {
            self.soak_violations += v.violations.len();
        } else if let Some(kind) = s
            .faults
            .first()
            .filter(|k| s.faults.iter().all(|f| f == *k))
        {
            let k = self.kinds.entry(*kind).or_default();
            k.violations += v.violations.len();
            k.excused += v.excused_total();
        }
        add_counts(&mut self.failures, &o.failures);
        self.clock_step = self.clock_step.max(o.clock_step);
    }

    pub(crate) fn report(&self, controls: &[(Flaw, &str, usize)], took: Duration) -> String {
        let opt = |v: Option<u64>| v.map_or("n/a".to_owned(), |t| format!("{:.0} ms", ms(t)));
        let mut s = String::new();
        s += "| figure | value |\n|---|---|\n";
        s += &format!("| acquisitions | {} |\n", self.acquisitions);
        s += &format!("| worker processes | {} |\n", self.processes);
        s += &format!("| violations | {} |\n", self.violations);
        s += &format!("| of which in the soaks | {} |\n", self.soak_violations);
        s += &format!("| stale writes accepted | {} |\n", self.stale_accepted);
        s += &format!(
            "| stale reads and writes rejected by the fence | {} |\n",
            self.rejected
        );
        s += &format!(
            "| overlaps whose older holder had been told before | {} |\n",
            self.known_before
        );
        s += &format!(
            "| losses told by the lease's deadline (a fault blocked the renewal) | {} |\n",
            self.told_by_deadline
        );
        s += &format!(
            "| starving rounds that took the pool (recorded by the worker) | {} of {} |\n",
            self.starved.0, self.starved.1
        );
        s += &format!(
            "| largest wall-clock step against the monotonic clock in a scenario | {:.1} ms |\n",
            ms(self.clock_step)
        );
        s += &format!("| run time | {:.0} s |\n", took.as_secs_f64());
        s += "\n| fault | injected | per master | violations (own scenario) | overlaps excused (own scenario) | max loss report | max takeover |\n|---|---|---|---|---|---|---|\n";
        for (k, f) in &self.kinds {
            let masters = if f.per_master.is_empty() {
                "".to_owned()
            } else {
                f.per_master
                    .iter()
                    .map(|(m, n)| format!("m{m}: {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            s += &format!(
                "| {} | {} | {masters} | {} | {} | {} | {} |\n",
                k.name(),
                f.injected,
                f.violations,
                f.excused,
                opt(f.loss_report),
                opt(f.takeover)
            );
        }
        s += "\n| overlaps excused, by why (holder told, fenced off) | count |\n|---|---|\n";
        for (why, n) in &self.excused {
            s += &format!("| {why} | {n} |\n");
        }
        s +=
            "\n| negative control | rule it must trip | violations of that rule |\n|---|---|---|\n";
        for (flaw, expected, n) in controls {
            s += &format!("| {} | {expected} | {n} |\n", flaw.code());
        }
        s += &self.linear.report();
        s += "\n| failed lock calls (bounded errors) | count |\n|---|---|\n";
        for (k, n) in &self.failures {
            s += &format!("| {k} | {n} |\n");
        }
        if !self.explained.is_empty() {
            s += "\n## Violations, with the faults and records around each\n\n";
            s += "Times are against the violation's moment (an overlap: the newer holder's entry); `*` marks the sections it names.\n";
            s += &self.explained;
        }
        s
    }
}
