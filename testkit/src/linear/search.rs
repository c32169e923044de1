//! The search (not written yet).

use super::{Checked, Model, Operation, Verdict};

pub fn run<M: Model>(_model: &M, _history: &[Operation<M::Op>], _budget: u64) -> Checked {
    Checked {
        verdict: Verdict::Linearizable,
        steps: 0,
    }
}
