//! The search: Wing and Gong's, as Lowe refined it ("just-in-time
//! linearization") and Porcupine runs it.
//!
//! Every operation is two entries, its invocation and its completion, in one
//! list sorted by time (at equal times invocations first: operations of two
//! processes that touch are taken as concurrent, which never finds an
//! anomaly that is not there; one process's operation invoked at the moment
//! its previous one completed is still taken after it, as program order
//! says). The search walks the list from its head: at an invocation it
//! tries to linearize that operation now (the model accepts it from the
//! current state), and if so takes both its entries out of the list and
//! starts again from the head; at a completion it has met an operation that
//! had to be linearized before that moment and was not, so it takes back
//! the last operation it linearized and tries the next one after it.
//!
//! A configuration (the set of operations linearized, and the state they
//! leave) reached before is not explored again (Lowe's memoization): the
//! set is a 128-bit Zobrist hash (a random key per operation, XORed in and
//! out in constant time), so a linearizable history of n operations costs
//! a few times n steps. Two different sets with the same hash would make
//! the search skip a configuration it has not seen, which can only turn a
//! linearizable history into a reported anomaly, never hide one; with 128
//! bits that takes some 10^19 configurations to become likely.
//!
//! An operation of unknown outcome completes at infinity: it may be
//! linearized at any moment after its invocation, and the search succeeds
//! once every operation that completed is linearized, whatever became of
//! the unknown ones (they may never have happened).

use std::collections::HashSet;

use super::{Anomaly, Checked, Model, Operation, Verdict};

/// No entry: the end of the list.
const END: usize = usize::MAX;

#[derive(Clone, Copy)]
struct Entry {
    time: u64,
    op: usize,
    call: bool,
}

/// The entries as a doubly linked list over their indices, with a head
/// sentinel: entries are taken out and put back in the order of a stack
/// (dancing links), so each keeps the neighbours it had.
struct List {
    next: Vec<usize>,
    prev: Vec<usize>,
    head: usize,
}

impl List {
    fn new(len: usize) -> List {
        // Entry i sits between i - 1 and i + 1; the head is index `len`.
        let head = len;
        let mut next: Vec<usize> = (1..=len).collect();
        let mut prev: Vec<usize> = (0..len).map(|i| i.wrapping_sub(1)).collect();
        if let Some(last) = next.last_mut() {
            *last = END;
        }
        if let Some(first) = prev.first_mut() {
            *first = head;
        }
        next.push(if len == 0 { END } else { 0 });
        prev.push(END);
        List { next, prev, head }
    }

    fn first(&self) -> usize {
        self.next.get(self.head).copied().unwrap_or(END)
    }

    fn after(&self, e: usize) -> usize {
        self.next.get(e).copied().unwrap_or(END)
    }

    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = n;
        if n != END {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        self.next[p] = e;
        if n != END {
            self.prev[n] = e;
        }
    }
}

/// 128-bit keys from SplitMix64 with a fixed seed: runs repeat exactly.
fn zobrist_keys(n: usize) -> Vec<u128> {
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..n)
        .map(|_| (u128::from(next()) << 64) | u128::from(next()))
        .collect()
}

/// How many distinct states an anomaly reports.
const STATES_SHOWN: usize = 4;

pub fn run<M: Model>(model: &M, history: &[Operation<M::Op>], budget: u64) -> Checked {
    let mut entries: Vec<Entry> = Vec::with_capacity(history.len() * 2);
    for (op, o) in history.iter().enumerate() {
        entries.push(Entry {
            time: o.call,
            op,
            call: true,
        });
        entries.push(Entry {
            // A completion recorded before its invocation (clocks) is taken
            // as at it.
            time: o.ret.map_or(u64::MAX, |r| r.max(o.call)),
            op,
            call: false,
        });
    }
    entries.sort_by_key(|e| (e.time, !e.call, e.op));
    let mut ret_of = vec![0; history.len()];
    for (i, e) in entries.iter().enumerate() {
        if !e.call {
            ret_of[e.op] = i;
        }
    }
    let after = tied_predecessors(history);
    let keys = zobrist_keys(history.len());
    let definite = |op: usize| history.get(op).is_some_and(|o| o.ret.is_some());
    let mut remaining = history.iter().filter(|o| o.ret.is_some()).count();

    let mut list = List::new(entries.len());
    let mut seen: HashSet<(u128, M::State)> = HashSet::new();
    let mut state = model.init();
    let mut linearized: u128 = 0;
    // Each operation linearized: its invocation entry, and the state before.
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    // Whether each operation is linearized (in `stack`).
    let mut done = vec![false; history.len()];
    // The deepest dead end: (completion time, depth, operation), and the
    // states met there.
    let mut deepest: Option<(u64, usize, usize)> = None;
    let mut states: Vec<M::State> = Vec::new();
    let mut steps: u64 = 0;
    let mut e = list.first();
    loop {
        if remaining == 0 {
            return Checked {
                verdict: Verdict::Linearizable,
                steps,
            };
        }
        if steps >= budget {
            return Checked {
                verdict: Verdict::GaveUp,
                steps,
            };
        }
        steps += 1;
        let entry = entries.get(e).copied();
        match entry {
            Some(en) if en.call => {
                let op = &history[en.op].op;
                // Not before its process's previous operation, which
                // completed at the moment it was invoked.
                let free = after[en.op].is_none_or(|p| done[p]);
                if let Some(next) = model.step(&state, op).filter(|_| free) {
                    let key = linearized ^ keys[en.op];
                    if seen.insert((key, next.clone())) {
                        stack.push((e, std::mem::replace(&mut state, next)));
                        done[en.op] = true;
                        linearized = key;
                        list.unlink(e);
                        list.unlink(ret_of[en.op]);
                        remaining -= usize::from(definite(en.op));
                        e = list.first();
                        continue;
                    }
                }
                e = list.after(e);
            }
            // An unknown outcome's completion, at infinity, binds nothing:
            // passed (an operation that completed at the clock's last value
            // may sort after it).
            Some(en) if !definite(en.op) => e = list.after(e),
            _ => {
                // A completion whose operation is not linearized (or, which
                // cannot happen, the end of the list): a dead end.
                if let Some(en) = entry {
                    let here = (en.time, stack.len(), en.op);
                    let deeper = deepest.is_none_or(|(t, d, _)| (here.0, here.1) > (t, d));
                    if deeper {
                        deepest = Some(here);
                        states.clear();
                    }
                    if (deeper || deepest == Some(here))
                        && states.len() < STATES_SHOWN
                        && !states.contains(&state)
                    {
                        states.push(state.clone());
                    }
                }
                let Some((call, before)) = stack.pop() else {
                    let (_, depth, op) = deepest.unwrap_or((0, 0, 0));
                    return Checked {
                        verdict: Verdict::Anomaly(Anomaly {
                            op,
                            linearized: depth,
                            states: states.iter().map(|s| format!("{s:?}")).collect(),
                        }),
                        steps,
                    };
                };
                let op = entries[call].op;
                done[op] = false;
                state = before;
                linearized ^= keys[op];
                list.relink(ret_of[op]);
                list.relink(call);
                remaining += usize::from(definite(op));
                e = list.after(call);
            }
        }
    }
}

/// For each operation, the operation of its process that completed at the
/// very moment it was invoked, if any: the search sorts invocations before
/// completions at equal times (concurrent), which is right for two
/// processes' clock readings but not for one process, whose operations
/// follow one another whatever its clock says. (Completed earlier, the
/// previous one is before it in real time anyway; of unknown outcome, it
/// may take effect later.)
fn tied_predecessors<O>(history: &[Operation<O>]) -> Vec<Option<usize>> {
    let mut order: Vec<usize> = (0..history.len()).collect();
    order.sort_by_key(|&i| history.get(i).map(|o| (o.process, o.call, o.ret, i)));
    let mut after = vec![None; history.len()];
    for pair in order.windows(2) {
        let (&[p, i], Some(prev), Some(o)) = (pair, history.get(pair[0]), history.get(pair[1]))
        else {
            continue;
        };
        if prev.process == o.process && prev.ret.map(|r| r.max(prev.call)) == Some(o.call) {
            after[i] = Some(p);
        }
    }
    after
}
