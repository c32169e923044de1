//! A linearizability checker for recorded histories, as Jepsen's Knossos
//! and Porcupine check theirs: every operation with its invocation and
//! completion times, per process, checked against a sequential model of
//! the object.
//!
//! - [`check`] searches for a linearization (Wing and Gong's search, with
//!   Lowe's just-in-time refinement and the memoization of visited
//!   (linearized set, state) pairs that Porcupine uses; the set is kept as
//!   a 128-bit Zobrist hash, updated in constant time per step);
//! - [`check_partitioned`] checks each key's operations apart (a history of
//!   independent objects is linearizable when each object's is);
//! - [`register`]: a compare-and-set register, with the faults that reset
//!   or lose its value as operations of their own;
//! - [`set`]: the set workload's checks (every acknowledged add present,
//!   none present twice, nothing present that was refused or never asked).
//!
//! Outcomes are treated as Jepsen treats them: an operation that **failed**
//! (the store refused it, nothing was applied) is left out of the history
//! given here; one whose outcome is **unknown** (a timeout, a lost reply, a
//! process killed in the middle) is given with no completion time
//! ([`Operation::unknown`]): it may have taken effect at any moment after
//! its invocation, or never.

mod search;

pub mod register;
pub mod set;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;

/// A sequential specification: the object's state, and what each operation
/// (with the result it returned) does to it.
pub trait Model {
    /// The object's state (small: the search keeps the states it visits).
    type State: Clone + Eq + Hash + Debug;
    /// An operation, with the result it returned (a read carries the value
    /// it read).
    type Op: Debug;
    /// The state before any operation.
    fn init(&self) -> Self::State;
    /// The state after `op` is applied to `state`, or `None` when `op`
    /// could not have returned what it returned from `state`.
    fn step(&self, state: &Self::State, op: &Self::Op) -> Option<Self::State>;
}

/// One operation of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation<O> {
    /// The process that ran it (a process runs one operation at a time:
    /// one it invoked at the clock reading its previous one completed, if
    /// that one completed, comes after it).
    pub process: u64,
    /// When it was invoked (any monotonic clock shared by the processes).
    pub call: u64,
    /// When it completed; `None` when its outcome is unknown.
    pub ret: Option<u64>,
    /// What it did, with its result.
    pub op: O,
}

impl<O> Operation<O> {
    /// An operation that completed (acknowledged) at `ret`.
    pub fn ok(process: u64, call: u64, ret: u64, op: O) -> Operation<O> {
        Operation {
            process,
            call,
            ret: Some(ret),
            op,
        }
    }

    /// An operation whose outcome is unknown: it took effect at some moment
    /// after `call`, or never.
    pub fn unknown(process: u64, call: u64, op: O) -> Operation<O> {
        Operation {
            process,
            call,
            ret: None,
            op,
        }
    }
}

/// What the search found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// An order of the operations exists that the model accepts and that
    /// keeps every operation that completed before another was invoked
    /// before it.
    Linearizable,
    /// None exists.
    Anomaly(Anomaly),
    /// The search ran out of its step budget (see [`check_with_budget`]):
    /// neither shown nor refuted.
    GaveUp,
}

/// Where a non-linearizable history went wrong: the operation whose
/// completion the deepest attempt could not pass (every order of the
/// operations before it left the object in a state from which it could not
/// have returned what it returned, or could not have happened at all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    /// The index of that operation in the history given.
    pub op: usize,
    /// How many operations the deepest attempt had linearized.
    pub linearized: usize,
    /// The states the object could be in there (a few, as text).
    pub states: Vec<String>,
}

/// A history's verdict and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub verdict: Verdict,
    /// Steps of the search (each an operation tried or taken back).
    pub steps: u64,
}

impl Checked {
    /// The anomaly, if the history is not linearizable.
    pub fn anomaly(&self) -> Option<&Anomaly> {
        match &self.verdict {
            Verdict::Anomaly(a) => Some(a),
            _ => None,
        }
    }
}

/// The step budget of [`check`]: far more than any history of the fault
/// suite needs (a linearizable history of n operations takes a few times n
/// steps), so that a search that goes exponential stops instead of hanging
/// the run.
pub const BUDGET: u64 = 200_000_000;

/// Checks `history` against `model` within [`BUDGET`] steps.
///
/// ```
/// use redmutex_testkit::linear::{check, register::{Op, Register}, Operation, Verdict};
/// // A write of 1 completes at t=2; a read invoked after it still sees nothing.
/// let history = [
///     Operation::ok(1, 0, 2, Op::Write(Some(1))),
///     Operation::ok(2, 3, 4, Op::Read(None)),
/// ];
/// assert!(matches!(check(&Register, &history).verdict, Verdict::Anomaly(_)));
/// ```
pub fn check<M: Model>(model: &M, history: &[Operation<M::Op>]) -> Checked {
    check_with_budget(model, history, BUDGET)
}

/// As [`check`], giving up ([`Verdict::GaveUp`]) after `budget` steps.
pub fn check_with_budget<M: Model>(
    model: &M,
    history: &[Operation<M::Op>],
    budget: u64,
) -> Checked {
    search::run(model, history, budget)
}

/// Checks each key's operations apart (`key` names the object an
/// operation is on); anomalies name operations by their index in
/// `history`. Keys with no operation are not listed.
///
/// Each operation is on one key: a fault that changes every key's data (a
/// flush, a restart) cannot be given here; check each key's history with
/// [`check`] and the fault's operation added to it instead (given to one
/// key only, it would leave the others' reads unexplained).
pub fn check_partitioned<M: Model, K: Ord>(
    model: &M,
    history: &[Operation<M::Op>],
    key: impl Fn(&M::Op) -> K,
) -> BTreeMap<K, Checked>
where
    M::Op: Clone,
{
    let mut parts: BTreeMap<K, Vec<usize>> = BTreeMap::new();
    for (i, o) in history.iter().enumerate() {
        parts.entry(key(&o.op)).or_default().push(i);
    }
    parts
        .into_iter()
        .map(|(k, indices)| {
            let part: Vec<Operation<M::Op>> = indices
                .iter()
                .filter_map(|&i| history.get(i).cloned())
                .collect();
            let mut checked = check(model, &part);
            if let Verdict::Anomaly(a) = &mut checked.verdict {
                a.op = indices.get(a.op).copied().unwrap_or(a.op);
            }
            (k, checked)
        })
        .collect()
}

/// The operations around `at` (an index in `history`), one line each in
/// the order of their invocation: the `around` invoked nearest before and
/// after its invocation, those nearest its completion (an operation paused
/// for a while has two neighbourhoods), and those of `also` (what the
/// caller knows to be related: the write of a value read, say), each
/// described by `show` (its process and what it did, say). Times are in
/// milliseconds against `at`'s completion (its invocation, when its
/// outcome is unknown); `*` marks `at`, `>` the operations of `also`, `?`
/// an unknown outcome, `...` a gap.
pub fn excerpt<O>(
    history: &[Operation<O>],
    at: usize,
    around: usize,
    also: &[usize],
    show: impl Fn(&Operation<O>) -> String,
) -> String {
    let Some(a) = history.get(at) else {
        return String::new();
    };
    let zero = a.ret.unwrap_or(a.call);
    let mut order: Vec<usize> = (0..history.len()).collect();
    order.sort_by_key(|&i| history.get(i).map(|o| (o.call, i)));
    // Positions (in invocation order) of the two neighbourhoods' centres.
    let first_after =
        |t: u64| order.partition_point(|&i| history.get(i).is_some_and(|o| o.call < t));
    let centres = [first_after(a.call), first_after(zero)];
    let near = |n: usize| centres.iter().any(|&c| n + around >= c && n <= c + around);
    let rel = |t: u64| (i128::from(t) - i128::from(zero)) as f64 / 1e6;
    let mut out = String::new();
    let mut gap = false;
    for (n, &i) in order.iter().enumerate() {
        let Some(o) = history.get(i) else { continue };
        let mark = if i == at {
            '*'
        } else if also.contains(&i) {
            '>'
        } else if near(n) {
            ' '
        } else {
            gap = true;
            continue;
        };
        if std::mem::take(&mut gap) && !out.is_empty() {
            out += "  ...\n";
        }
        let done = o.ret.map_or("?".to_owned(), |r| format!("{:+.3}", rel(r)));
        out += &format!("{mark} {:+.3} .. {done} ms  {}\n", rel(o.call), show(o));
    }
    out
}
