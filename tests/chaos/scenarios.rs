//! The fault suite's scenarios: every single-server fault in its own, the
//! Redlock and Sentinel ones, and the long profile's soaks.

use std::time::Duration;

use crate::history::Kind;
use crate::{Forks, Scenario, SlowWaiters, BREAKS};

/// Every scenario of the profile (`long`: the long one), in the order run.
pub(crate) fn all(long: bool) -> Vec<Scenario> {
    let mut scenarios: Vec<Scenario> = Kind::ONE_SERVER.iter().map(|k| Scenario::one(*k)).collect();
    scenarios.push(Scenario {
        name: "Redlock over 3 masters".into(),
        redlock: true,
        sentinel: None,
        flaw: None,
        faults: REDLOCK_FAULTS.to_vec(),
        soak: None,
        fast_clocks: false,
        slow_waiters: SlowWaiters::No,
        forked_workers: Forks::No,
    });
    scenarios.push(Scenario {
        name: "Redlock: clocks an hour fast, every master restarted empty".into(),
        redlock: true,
        sentinel: None,
        flaw: None,
        faults: vec![Kind::KillAll; 3],
        soak: None,
        fast_clocks: true,
        slow_waiters: SlowWaiters::No,
        forked_workers: Forks::No,
    });
    scenarios.push(Scenario {
        name: "Redlock: one master hung across unlocks".into(),
        redlock: true,
        sentinel: None,
        flaw: None,
        faults: vec![Kind::HangMaster; 3],
        soak: None,
        fast_clocks: false,
        slow_waiters: SlowWaiters::No,
        forked_workers: Forks::No,
    });
    scenarios.push(Scenario {
        name: "Redlock: a majority eroded one master at a time".into(),
        redlock: true,
        sentinel: None,
        flaw: None,
        faults: vec![Kind::FlushTwo; 4],
        soak: None,
        fast_clocks: false,
        slow_waiters: SlowWaiters::No,
        forked_workers: Forks::No,
    });
    for (replicas, name) in [
        (0, "Sentinel failover while holding"),
        (1, "Sentinel failover while holding, min_replicas 1"),
    ] {
        scenarios.push(Scenario {
            name: name.into(),
            redlock: false,
            sentinel: Some(replicas),
            flaw: None,
            faults: vec![Kind::Failover; if long { 3 } else { 1 }],
            soak: None,
            fast_clocks: false,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        });
    }
    if long {
        scenarios.push(Scenario {
            name: "Sentinel soak: failovers and holder faults, mixed".into(),
            redlock: false,
            sentinel: Some(1),
            flaw: None,
            // A workload holder paused too: the fenced set's holder.
            faults: [&SENTINEL_FAULTS[..], &[Kind::PauseLinearHolder]].concat(),
            soak: Some(Duration::from_secs(60)),
            fast_clocks: false,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        });
        scenarios.push(Scenario {
            name: "soak: every fault, mixed".into(),
            redlock: false,
            sentinel: None,
            flaw: None,
            // An operator's breaks and the pause of a workload holder too
            // (their own scenarios in the short profile).
            faults: [
                &Kind::ONE_SERVER[..],
                &[Kind::Break, Kind::PauseLinearHolder],
            ]
            .concat(),
            soak: Some(Duration::from_secs(240)),
            fast_clocks: false,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        });
        scenarios.push(Scenario {
            name: "Redlock soak: every fault, mixed".into(),
            redlock: true,
            sentinel: None,
            flaw: None,
            faults: [&REDLOCK_FAULTS[..], &[Kind::PauseLinearHolder]].concat(),
            soak: Some(Duration::from_secs(90)),
            fast_clocks: true,
            slow_waiters: SlowWaiters::No,
            forked_workers: Forks::No,
        });
    }
    scenarios.push(Scenario {
        name: "waiters with 60 s backoffs killed while queued".into(),
        faults: vec![Kind::KillWaiter; 3],
        slow_waiters: SlowWaiters::Yes,
        forked_workers: Forks::No,
        ..Scenario::one(Kind::KillWaiter)
    });
    scenarios.push(Scenario {
        name: "operator breaks holds at random".into(),
        faults: BREAKS.to_vec(),
        ..Scenario::one(Kind::Break)
    });
    // The linearizability control's fault: the workloads' holder paused
    // between its reads and its writes (see `linear.rs`); the control
    // register must show an anomaly, the guarded one and the set none.
    scenarios.push(Scenario {
        name: "SIGSTOP of a workload holder between read and write".into(),
        faults: vec![Kind::PauseLinearHolder; 3],
        ..Scenario::one(Kind::PauseLinearHolder)
    });
    scenarios.push(Scenario {
        name: "forked workers (after a watchdog in the parent)".into(),
        faults: vec![
            Kind::KillHolder,
            Kind::KillWaiter,
            Kind::Del,
            Kind::PauseServer,
        ],
        forked_workers: Forks::Yes,
        ..Scenario::one(Kind::KillHolder)
    });
    scenarios
}

const SENTINEL_FAULTS: [Kind; 5] = [
    Kind::Failover,
    Kind::Failover,
    Kind::KillHolder,
    Kind::KillWaiter,
    Kind::PauseHolder,
];

const REDLOCK_FAULTS: [Kind; 14] = [
    Kind::KillHolder,
    Kind::KillWaiter,
    Kind::PauseHolder,
    Kind::PauseServer,
    Kind::Del,
    Kind::FlushAll,
    Kind::ScriptFlush,
    Kind::ClientKill,
    Kind::StarvePool,
    Kind::FlushTwo,
    Kind::KillTwo,
    Kind::SkewMaster,
    Kind::KillAll,
    Kind::HangMaster,
];
