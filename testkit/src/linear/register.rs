//! A compare-and-set register (Knossos's `cas-register`), whose values are
//! `u64`s or nothing (`None`: the key does not exist).
//!
//! A read-modify-write under a lock (read `v`, then write `w` while the
//! lock is held) is a compare-and-set from `v` to `w` when the lock
//! excludes: nobody writes between the read and the write. Written with a
//! value unique per operation, a history of such writes and of plain reads
//! leaves the search few choices, and a holder that wrote after losing its
//! lock shows as two writes from the same value.
//!
//! Faults on the store are operations of their own, with the window in
//! which they happened: a flush or a restart with no data writes nothing
//! ([`Op::Write`]`(None)`); a restart that reloads older data of unknown
//! value puts the register in a state that the next operation fixes
//! ([`Op::Havoc`]).

use super::Model;

/// The register's model; it starts with no value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Register;

/// An operation on the register, with its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// A read that returned this value.
    Read(Option<u64>),
    /// A write of `to` that took effect only if the value was `from`.
    Cas { from: Option<u64>, to: u64 },
    /// A write of a value, whatever was there.
    Write(Option<u64>),
    /// The value replaced by one nobody knows (a restart from older data).
    Havoc,
}

/// What the register holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Known(Option<u64>),
    /// Unknown since a [`Op::Havoc`], until an operation shows it.
    Any,
}

impl Model for Register {
    type State = State;
    type Op = Op;

    fn init(&self) -> State {
        State::Known(None)
    }

    fn step(&self, state: &State, op: &Op) -> Option<State> {
        match (*op, *state) {
            (Op::Read(v), State::Known(x)) => (x == v).then_some(*state),
            (Op::Read(v), State::Any) => Some(State::Known(v)),
            (Op::Cas { from, to }, State::Known(x)) => {
                (x == from).then_some(State::Known(Some(to)))
            }
            (Op::Cas { to, .. }, State::Any) => Some(State::Known(Some(to))),
            (Op::Write(v), _) => Some(State::Known(v)),
            (Op::Havoc, _) => Some(State::Any),
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = |v: Option<u64>| v.map_or("nil".to_owned(), |v| v.to_string());
        match *self {
            Op::Read(x) => write!(f, "read {}", v(x)),
            Op::Cas { from, to } => write!(f, "cas {} -> {to}", v(from)),
            Op::Write(x) => write!(f, "write {}", v(x)),
            Op::Havoc => write!(f, "havoc (value lost)"),
        }
    }
}
