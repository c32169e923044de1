//! The workloads' histories checked: the registers by the linearizability
//! checker, the set by its rules; what a scenario prints of them.

use std::time::{Duration, Instant};

use redmutex_testkit::linear::register::{self, Register};
use redmutex_testkit::linear::{self as checker, set, Checked, Operation, Verdict};

use super::{faults_as_operations, Histories, Workloads, LOCK, READER, THREADS, WRITER};
use crate::history::{rule, Event, Kind, Violation};
use crate::Scenario;

/// One register history's check.
#[derive(Debug)]
pub struct RegisterCheck {
    /// Operations checked (the faults' included), and how many of them had
    /// an unknown outcome.
    pub ops: usize,
    pub unknown: usize,
    /// Writes refused, left out.
    pub refused: usize,
    pub checked: Checked,
    pub took: Duration,
    /// Around the anomaly: the operations, one a line (see
    /// `linear::excerpt`), and the anomaly's moment (its completion).
    pub excerpt: Option<(u64, String)>,
}

impl RegisterCheck {
    pub fn anomalies(&self) -> usize {
        usize::from(self.checked.anomaly().is_some())
    }

    fn run(
        mut ops: Vec<Operation<register::Op>>,
        faults: &[Operation<register::Op>],
        refused: usize,
    ) -> RegisterCheck {
        ops.extend(faults.iter().cloned());
        let started = Instant::now();
        let checked = checker::check(&Register, &ops);
        let took = started.elapsed();
        let excerpt = checked.anomaly().map(|a| {
            let at = ops.get(a.op).map_or(0, |o| o.ret.unwrap_or(o.call));
            let show = |o: &Operation<register::Op>| format!("{:<6} {}", process_name(o.process), o.op);
            let also = related(&ops, a.op);
            let mut text = checker::excerpt(&ops, a.op, 6, &also, show);
            text += &format!(
                "  (no order of the operations up to the one marked * lets it return what it returned; the state there could be: {})\n",
                a.states.join(", ")
            );
            (at, text)
        });
        RegisterCheck {
            unknown: ops.iter().filter(|o| o.ret.is_none()).count(),
            ops: ops.len(),
            refused,
            checked,
            took,
            excerpt,
        }
    }

    /// One line of figures.
    pub fn summary(&self) -> String {
        let verdict = match &self.checked.verdict {
            Verdict::Linearizable => "linearizable".to_owned(),
            Verdict::Anomaly(_) => "NOT linearizable".to_owned(),
            Verdict::GaveUp => format!("search gave up after {} steps", self.checked.steps),
        };
        format!(
            "{} ops ({} unknown, {} refused), {verdict}",
            self.ops, self.unknown, self.refused
        )
    }
}

/// A process as the excerpts name it: `w<worker>` for a worker's writer
/// thread, `w<worker>.r` for its reader, `fault` for a fault's operation.
fn process_name(p: u64) -> String {
    if p > u64::MAX - 1_000_000 {
        return "fault".to_owned();
    }
    let (worker, thread) = (p / THREADS, p % THREADS);
    match thread {
        WRITER => format!("w{worker}"),
        READER => format!("w{worker}.r"),
        n => format!("w{worker}.{n}"),
    }
}

/// The operations that explain an anomaly at `at`: the writes of the
/// value it read (or wrote from), and the other writes from the value those
/// wrote from (two writes from one value: a lost update). At most eight.
fn related(ops: &[Operation<register::Op>], at: usize) -> Vec<usize> {
    use register::Op;
    let value = match ops.get(at).map(|o| o.op) {
        Some(Op::Read(v) | Op::Cas { from: v, .. }) => v,
        _ => return Vec::new(),
    };
    let wrote = |o: &Operation<Op>| matches!(o.op, Op::Cas { to, .. } if Some(to) == value);
    let mut froms: Vec<Option<u64>> = ops
        .iter()
        .filter(|o| wrote(o))
        .filter_map(|o| match o.op {
            Op::Cas { from, .. } => Some(from),
            _ => None,
        })
        .collect();
    if let Some(Op::Cas { from, .. }) = ops.get(at).map(|o| o.op) {
        froms.push(from);
    }
    ops.iter()
        .enumerate()
        .filter(|(i, o)| {
            *i != at && (wrote(o) || matches!(o.op, Op::Cas { from, .. } if froms.contains(&from)))
        })
        .map(|(i, _)| i)
        .take(8)
        .collect()
}

/// The set's check.
#[derive(Debug)]
pub struct SetCheck {
    pub report: set::Report,
    pub took: Duration,
}

/// A run's workloads, checked.
#[derive(Debug, Default)]
pub struct Checks {
    pub guarded: Option<RegisterCheck>,
    pub control: Option<RegisterCheck>,
    pub set: Option<SetCheck>,
}

impl Checks {
    /// Checks the histories in `texts` (each worker's records), with the
    /// run's `events`, and `read` the set's elements as read at the end.
    pub fn run(w: Workloads, texts: &[String], events: &[Event], read: &[u64]) -> Checks {
        if w == Workloads::None {
            return Checks::default();
        }
        let h = Histories::parse(texts);
        let faults = faults_as_operations(events);
        let registers = w == Workloads::All;
        let started = Instant::now();
        let report = set::check(&h.adds, read);
        let set = SetCheck {
            report,
            took: started.elapsed(),
        };
        Checks {
            guarded: registers.then(|| RegisterCheck::run(h.guarded, &faults, h.refused[0])),
            control: registers.then(|| RegisterCheck::run(h.control, &faults, h.refused[1])),
            set: Some(set),
        }
    }

    /// The checker's time over every history.
    pub fn took(&self) -> Duration {
        [&self.guarded, &self.control]
            .into_iter()
            .flatten()
            .map(|c| c.took)
            .sum::<Duration>()
            + self.set.as_ref().map_or(Duration::ZERO, |s| s.took)
    }

    /// The figures printed under a scenario's line.
    pub fn summary(&self) -> Option<String> {
        let set = self.set.as_ref()?;
        let r = &set.report;
        let mut s = String::from("    linearizability:");
        if let Some(g) = &self.guarded {
            s += &format!(" run_if_held register {};", g.summary());
        }
        s += &format!(
            " fenced set {} adds ({} acknowledged, {} refused, {} unknown), {} present, {} anomalies;",
            r.acknowledged + r.refused + r.unknown,
            r.acknowledged,
            r.refused,
            r.unknown,
            r.present,
            r.anomalies()
        );
        if let Some(c) = &self.control {
            s += &format!(" control register {};", c.summary());
        }
        s += &format!(" checker {:.1} ms", self.took().as_secs_f64() * 1e3);
        Some(s)
    }
}

impl Checks {
    /// The rules the guarded register and the set must keep, broken: a
    /// history not shown linearizable (an anomaly, or a search that gave
    /// up), and each of the set's anomalies.
    pub fn violations(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        if let Some(g) = self
            .guarded
            .as_ref()
            .filter(|g| g.checked.verdict != Verdict::Linearizable)
        {
            out.push(Violation {
                rule: rule::LINEARIZABLE,
                text: format!(
                    "the register written through Guard::run_if_held ({}): the operations around the anomaly follow",
                    g.summary()
                ),
                at: g.excerpt.as_ref().map(|(at, _)| *at),
                lock: Some(LOCK.to_owned()),
                involved: Vec::new(),
            });
        }
        if let Some(s) = self.set.as_ref().filter(|s| s.report.anomalies() > 0) {
            out.push(Violation::new(
                rule::FENCED_SET,
                format!(
                    "the set written through fence::admit_and_run: {}",
                    s.report.describe(10).trim_end().replace('\n', "; ")
                ),
            ));
        }
        out
    }

    /// What explains `v` beyond the suite's own explanation: the register's
    /// operations around its anomaly.
    pub fn explain(&self, v: &Violation) -> String {
        match (v.rule, &self.guarded) {
            (rule::LINEARIZABLE, Some(g)) => indent(g.excerpt.as_ref().map_or("", |(_, t)| t)),
            _ => String::new(),
        }
    }
}

/// `text` indented as the suite's explanations are.
pub fn indent(text: &str) -> String {
    text.lines().map(|l| format!("      {l}\n")).collect()
}

/// Prints a scenario's workload figures and the control's anomaly, if any;
/// `false` when the control did not trip where it must: a scenario of
/// [`Kind::PauseLinearHolder`] pauses alone, at least one of which landed.
pub fn report_run(s: &Scenario, out: &crate::Outcome) -> bool {
    let Some(line) = out.linear.summary() else {
        return true;
    };
    println!("{line}");
    let control = out.linear.control.as_ref();
    if let Some((_, text)) = control.and_then(|c| c.excerpt.as_ref()) {
        println!("    control's anomaly (a holder that had lost the lock wrote anyway):");
        print!("{}", indent(text));
    }
    let must_trip = s.soak.is_none()
        && !s.faults.is_empty()
        && s.faults.iter().all(|k| *k == Kind::PauseLinearHolder)
        && out.events.iter().any(|e| e.kind == Kind::PauseLinearHolder);
    if must_trip && control.is_some_and(|c| c.anomalies() == 0) {
        println!("    FAILED: the control register showed no anomaly though its holder was paused between its read and its write");
        return false;
    }
    true
}
