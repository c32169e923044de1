//! The set workload's checks (Jepsen's set checker, with refusals): each
//! process adds elements of its own, each add acknowledged, refused or of
//! unknown outcome; the set is read once at the end. Every acknowledged add
//! must be present, none present twice, nothing present that was refused
//! or never added; an add of unknown outcome may be present or not.

use std::collections::{BTreeMap, HashMap};

/// How an add ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged: it took effect.
    Ok,
    /// Refused: nothing was applied.
    Refused,
    /// No answer: applied or not.
    Unknown,
}

/// What the final read showed against the adds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub acknowledged: usize,
    pub refused: usize,
    pub unknown: usize,
    /// Elements in the final read.
    pub present: usize,
    /// Adds of unknown outcome whose element is present.
    pub recovered: usize,
    /// Acknowledged adds whose element is missing.
    pub lost: Vec<u64>,
    /// Elements present more than once.
    pub duplicated: Vec<u64>,
    /// Refused adds whose element is present.
    pub refused_present: Vec<u64>,
    /// Elements present that nobody added.
    pub unexpected: Vec<u64>,
}

impl Report {
    /// Every element that breaks a rule, counted once per rule broken.
    pub fn anomalies(&self) -> usize {
        self.lost.len() + self.duplicated.len() + self.refused_present.len() + self.unexpected.len()
    }

    /// The anomalies, one line each (at most `max` per rule).
    pub fn describe(&self, max: usize) -> String {
        let mut out = String::new();
        for (what, elements) in [
            ("acknowledged but missing", &self.lost),
            ("present more than once", &self.duplicated),
            ("refused but present", &self.refused_present),
            ("present but never added", &self.unexpected),
        ] {
            if elements.is_empty() {
                continue;
            }
            let shown: Vec<String> = elements.iter().take(max).map(u64::to_string).collect();
            let more = elements.len().saturating_sub(max);
            out += &format!("{what} ({}): {}", elements.len(), shown.join(", "));
            if more > 0 {
                out += &format!(" and {more} more");
            }
            out += "\n";
        }
        out
    }
}

/// Checks the final read `read` (every element as read, repeats included)
/// against `adds` (each element with how its add ended).
///
/// ```
/// use redmutex_testkit::linear::set::{check, Outcome};
/// let adds = [(1, Outcome::Ok), (2, Outcome::Refused), (3, Outcome::Unknown)];
/// let report = check(&adds, &[1, 3]);
/// assert_eq!(report.anomalies(), 0);
/// assert_eq!(report.recovered, 1);
/// assert_eq!(check(&adds, &[3]).lost, vec![1]);
/// ```
pub fn check(adds: &[(u64, Outcome)], read: &[u64]) -> Report {
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for e in read {
        *seen.entry(*e).or_default() += 1;
    }
    let outcome: HashMap<u64, Outcome> = adds.iter().copied().collect();
    let mut r = Report {
        present: seen.len(),
        ..Report::default()
    };
    for (e, o) in adds {
        let there = seen.contains_key(e);
        match o {
            Outcome::Ok => {
                r.acknowledged += 1;
                if !there {
                    r.lost.push(*e);
                }
            }
            Outcome::Refused => {
                r.refused += 1;
                if there {
                    r.refused_present.push(*e);
                }
            }
            Outcome::Unknown => {
                r.unknown += 1;
                r.recovered += usize::from(there);
            }
        }
    }
    for (e, n) in &seen {
        if *n > 1 {
            r.duplicated.push(*e);
        }
        if !outcome.contains_key(e) {
            r.unexpected.push(*e);
        }
    }
    r
}
