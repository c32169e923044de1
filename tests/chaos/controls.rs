//! The negative controls: a locker broken in one way must trip the rule
//! that is there for that mistake.

use crate::broken::Flaw;
use crate::history::{rule, Kind};
use crate::run::run;
use crate::{Forks, Scenario, SlowWaiters};

/// Tampers enough that one of them finds a holder with time left to be told.
const TAMPERS: [Kind; 4] = [Kind::Del, Kind::ForeignSet, Kind::Del, Kind::Pexpire];

/// Each negative control: the flaw, the faults that bring it out, and the
/// rule that must catch it.
const CONTROLS: [(Flaw, &[Kind], &str); 8] = [
    (Flaw::ReusesToken, &[], rule::FENCING),
    (Flaw::ResetsCounter, &[], rule::FENCING),
    (
        Flaw::ReleasesWithoutOwnerCheck,
        &[Kind::PauseHolder, Kind::PauseHolder],
        rule::EXCLUSION,
    ),
    (Flaw::IgnoresNotOurs, &TAMPERS, rule::LOSS_REPORT),
    (Flaw::NeverReleases, &[], rule::HANDOVER),
    (Flaw::NeverReportsLoss, &TAMPERS, rule::LOSS_REPORT),
    // A holder never told of an operator's break: twice the breaks of the
    // scenario, since a break that finds its holder about to release (or
    // renewing as it lands) leaves nobody with time left to be told (one
    // run of eight breaks had two that did).
    (Flaw::NeverReportsLoss, &[Kind::Break; 8], rule::LOSS_REPORT),
    (
        Flaw::RenewsThroughThePool,
        &[Kind::StarvePool, Kind::StarvePool],
        rule::STARVED,
    ),
];

/// Runs every control (those `only` selects); each control that trips
/// nothing sets `failed`. Each flaw with the rule it must trip and how many
/// times it did.
pub(crate) fn run_all(
    only: &Option<String>,
    failed: &mut bool,
) -> Vec<(Flaw, &'static str, usize)> {
    let selected = |s: &Scenario| {
        only.as_ref()
            .is_none_or(|o| s.name.contains(o.as_str()) || o.contains("control"))
    };
    let mut controls = Vec::new();
    for (flaw, faults, expected) in CONTROLS {
        let s = Scenario {
            name: if faults.contains(&Kind::Break) {
                format!("negative control: {}, operator breaks", flaw.code())
            } else {
                format!("negative control: {}", flaw.code())
            },
            redlock: false,
            sentinel: None,
            flaw: Some(flaw),
            faults: faults.to_vec(),
            soak: None,
            fast_clocks: false,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        };
        if selected(&s) {
            let tripped = trip(&s, expected, "this broken locker", failed);
            controls.push((flaw, expected, tripped));
        }
    }

    // The forked workers' control: a child whose lockers renew nothing
    // loses its long holds, unaware.
    let s = Scenario {
        name: "negative control: child-without-watchdog".into(),
        faults: vec![],
        forked_workers: Forks::ChildWithoutWatchdog,
        ..Scenario::one(Kind::KillHolder)
    };
    if selected(&s) {
        trip(
            &s,
            rule::KEPT,
            "a child whose leases are not renewed",
            failed,
        );
    }

    // The bounded stay's control: a dead waiter whose place lasts a minute
    // keeps a released lock from everyone far past the bound.
    let s = Scenario {
        name: "negative control: unbounded-stay".into(),
        faults: vec![Kind::KillWaiter; 2],
        slow_waiters: SlowWaiters::UnboundedStay,
        forked_workers: Forks::No,
        ..Scenario::one(Kind::KillWaiter)
    };
    if selected(&s) {
        trip(
            &s,
            rule::TAKEOVER,
            "a dead waiter's minute-long stay",
            failed,
        );
    }

    controls
}

/// Runs the control `s`, which must break rule `expected` (`what` it runs,
/// for the message when it does not: then `failed` is set); how many times
/// it did.
fn trip(s: &Scenario, expected: &'static str, what: &str, failed: &mut bool) -> usize {
    let out = run(s);
    let tripped = out.verdict.count(expected);
    println!(
        "{:<52} {tripped} [{expected}] violations, {} in all (expected: some [{expected}])",
        s.name,
        out.verdict.violations.len()
    );
    if let Some(v) = out.verdict.violations.iter().find(|v| v.rule == expected) {
        println!("    e.g. {v}");
    }
    if tripped == 0 {
        println!("    FAILED: the [{expected}] rule saw nothing wrong with {what}");
        *failed = true;
    }
    tripped
}
