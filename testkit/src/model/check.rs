//! Checking the models: every interleaving within a model's bounds (depth
//! first), optionally stopped after a time budget, and the shortest path
//! on which a model breaks a property (breadth first).
//!
//! Here rather than in `tests/model.rs`: stateright's checker is generic
//! over the model, so its code is compiled in the crate that names the
//! model type. Named here, for the two models, it is compiled with this
//! crate's optimisation (the workspace's `[profile.dev.package]` settings
//! optimise this crate and stateright even in a debug build), so the
//! debug build that runs the whole suite checks the models many times
//! faster than at opt-level 0.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model};

use super::redlock::Redlock;
use super::single::Protocol;

/// What one check covered.
#[derive(Debug, Clone, Copy)]
pub struct Coverage {
    /// States generated (some more than once).
    pub states: usize,
    /// Distinct states.
    pub unique: usize,
    /// The longest path followed, in steps.
    pub depth: usize,
    /// How long the check took.
    pub elapsed: Duration,
    /// Every state within the bounds was checked: no time budget ran out
    /// first.
    pub complete: bool,
}

/// A model that the checks below know (the two of [`super`]).
pub trait Check: Sized {
    /// Checks every property over every interleaving within the model's
    /// bounds, depth first, for at most `budget` when one is given.
    ///
    /// # Panics
    ///
    /// On a property broken in a state it reached ("always", or
    /// "eventually" on a path's end), with the path. On a "sometimes"
    /// property never met, when the check was complete (one stopped by its
    /// budget may simply not have come to it yet: those are returned).
    fn check(self, budget: Option<Duration>) -> (Coverage, Vec<&'static str>);

    /// The shortest path (breadth first) on which the model breaks
    /// `property`, as its actions; `None` when it keeps it within its
    /// bounds. Stops at the first such path.
    fn counterexample(self, property: &'static str) -> Option<Vec<String>>;
}

impl Check for Protocol {
    fn check(self, budget: Option<Duration>) -> (Coverage, Vec<&'static str>) {
        check(self, budget)
    }

    fn counterexample(self, property: &'static str) -> Option<Vec<String>> {
        counterexample(self, property)
    }
}

impl Check for Redlock {
    fn check(self, budget: Option<Duration>) -> (Coverage, Vec<&'static str>) {
        check(self, budget)
    }

    fn counterexample(self, property: &'static str) -> Option<Vec<String>> {
        counterexample(self, property)
    }
}

fn check<M>(model: M, budget: Option<Duration>) -> (Coverage, Vec<&'static str>)
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + Hash + Send + Sync + 'static,
    M::Action: Debug + Send + Sync + 'static,
{
    let started = Instant::now();
    let builder = model.checker();
    // stateright's timeout stops a checker only when its threads share
    // work, which one thread never does: a budget takes two.
    let builder = match budget {
        Some(budget) => builder.threads(2).timeout(budget),
        None => builder,
    };
    let checker = builder.spawn_dfs().join();
    let elapsed = started.elapsed();
    // Its timeout closes the checker within a second past the budget; one
    // that ended before the budget ran out of states first.
    let complete = budget.is_none_or(|budget| elapsed < budget);
    let coverage = Coverage {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        elapsed,
        complete,
    };
    let mut unmet = Vec::new();
    for property in checker.model().properties() {
        match property.expectation {
            Expectation::Always | Expectation::Eventually => {
                checker.assert_no_discovery(property.name);
            }
            Expectation::Sometimes if complete => {
                checker.assert_any_discovery(property.name);
            }
            Expectation::Sometimes => {
                if checker.discovery(property.name).is_none() {
                    unmet.push(property.name);
                }
            }
        }
    }
    (coverage, unmet)
}

fn counterexample<M>(model: M, property: &'static str) -> Option<Vec<String>>
where
    M: Model + Send + Sync + 'static,
    M::State: Debug + Hash + Send + Sync + 'static,
    M::Action: Debug + Send + Sync + 'static,
{
    let checker = model
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let path = checker.discovery(property)?;
    Some(
        path.into_actions()
            .iter()
            .map(|action| format!("{action:?}"))
            .collect(),
    )
}
