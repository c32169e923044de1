//! The lock protocol's models (in `redmutex-testkit`'s `model`), checked
//! over every interleaving within bounds with `stateright`: the
//! single-instance protocol (exclusion, fencing, claim, guarded writes;
//! liveness under fair scheduling), and Redlock over three masters (exclusion and fencing
//! through one master's data loss). Each old hole put back into a model is
//! found, and its counterexample printed.
//!
//! The bounds: small ones in a debug build (the README's `cargo test`), the
//! ones RELIABILITY.md reports in a release build or with
//! `REDMUTEX_MODEL=full`, wider ones with `REDMUTEX_MODEL=long`.
//! `REDMUTEX_MODEL_SECONDS=N` stops each check after N seconds (`.ci/run`
//! checks the full bounds so, and completely in its `long` mode); a check
//! stopped so still fails on any broken property it met, and says how far
//! it went. The counterexamples are always searched to the end.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::Duration;

use redmutex_testkit::model::check::Check;
use redmutex_testkit::model::redlock::{self, Loss, Redlock};
use redmutex_testkit::model::single::{Fair, Flaw, Protocol};

/// Checks every property of `model` over every interleaving within its
/// bounds (depth first; for at most `REDMUTEX_MODEL_SECONDS` when set),
/// after saying what was checked, how many states and how long it took.
fn check_all(what: &str, model: impl Check) {
    let budget = std::env::var("REDMUTEX_MODEL_SECONDS")
        .ok()
        .map(|s| Duration::from_secs(s.parse().expect("REDMUTEX_MODEL_SECONDS: whole seconds")));
    let (covered, unmet) = model.check(budget);
    let stopped = if covered.complete {
        String::new()
    } else {
        format!(
            ", stopped by its budget (REDMUTEX_MODEL_SECONDS), not met yet: {}",
            if unmet.is_empty() {
                "none".to_owned()
            } else {
                unmet.join(", ")
            }
        )
    };
    eprintln!(
        "{what}: {} states ({} unique, {} steps deep) in {:.1?}{stopped}",
        covered.states, covered.unique, covered.depth, covered.elapsed
    );
}

/// Finds the shortest path (breadth first) on which `model` breaks
/// `property`, and prints it under `title`; fails when there is none.
fn counterexample(title: &str, model: impl Check, property: &'static str) {
    let path = model
        .counterexample(property)
        .unwrap_or_else(|| panic!("{title}: the checker found no counterexample"));
    eprintln!("{title}:");
    for action in path {
        eprintln!("  {action}");
    }
}

/// The bounds RELIABILITY.md reports, rather than the debug build's
/// smaller ones: a release build, or `REDMUTEX_MODEL=full` (or `long`).
fn full() -> bool {
    !cfg!(debug_assertions) || long() || std::env::var("REDMUTEX_MODEL").is_ok_and(|v| v == "full")
}

/// The bounds: (clients, grants per client, horizon in ticks). A restore
/// can come at any point, which multiplies the states: that variant gets a
/// tick less.
fn bounds(restores: bool) -> (usize, u8, u64) {
    // The small bounds (a debug build's, unless told otherwise) are two
    // ticks less: the README's `cargo test` checks them completely in
    // seconds.
    let horizon = if long() {
        6
    } else if full() {
        5
    } else {
        3
    };
    (2, 2, if restores { horizon - 1 } else { horizon })
}

fn protocol(restores: bool, flaw: Option<Flaw>) -> Protocol {
    let (clients, grants, horizon) = bounds(restores);
    Protocol {
        clients,
        ttl: 3,
        stay: 2,
        horizon,
        grants,
        writes: 0,
        // With restores, only fencing is checked: nobody dies or gives up.
        leavers: u8::from(!restores),
        restores,
        flaw,
        drift: DRIFT,
        // A key that goes early changes the server's state only as a
        // holder that stopped renewing a tick sooner would: fencing, the
        // one property checked with a restore, gets no new states from it,
        // and the states it adds to that check would cost more than the
        // rest of the check together.
        skew: if restores { 0 } else { DRIFT },
        fair: None,
        doubt: false,
        delay: 0,
    }
}

/// The drift allowance in the checks, and how much sooner than its TTL
/// the server may expire a key: a server clock a third fast against the
/// clients' over a 3 ms TTL.
const DRIFT: u64 = 1;

fn long() -> bool {
    std::env::var("REDMUTEX_MODEL").is_ok_and(|v| v == "long")
}

#[test]
fn the_protocol_keeps_its_properties_in_every_interleaving() {
    for restores in [false, true] {
        let model = protocol(restores, None);
        let what = format!(
            "model{}: {} clients, {} grants each, {} ms, TTL 3 ms, stay 2 ms, drift {} ms, \
             keys expire up to {} ms early",
            if restores { " with a restore" } else { "" },
            model.clients,
            model.grants,
            model.horizon,
            model.drift,
            model.skew
        );
        check_all(&what, model);
    }
}

/// Each old hole, put back, is found, with the path that shows it.
#[test]
fn the_old_holes_are_found() {
    for (flaw, restores, property) in [
        (Flaw::OldMint, true, "fencing"),
        (Flaw::NoClaim, false, "claim"),
        (Flaw::UnboundedStay, false, "stay"),
    ] {
        let title = format!("{flaw:?} breaks {property}");
        counterexample(&title, protocol(restores, Some(flaw)), property);
    }
    // A claim believed for the TTL breaks its property the moment it is
    // heard, no time passing: small bounds find it (the usual ones take
    // minutes to search breadth first that deep).
    let trusting = Protocol {
        grants: 1,
        leavers: 0,
        horizon: 2,
        ..protocol(false, Some(Flaw::TrustedClaim))
    };
    counterexample(
        "TrustedClaim breaks claim believed within it",
        trusting,
        "claim believed within it",
    );
    let title = "DoubtOutlivesDeadline breaks in doubt";
    counterexample(
        title,
        doubting(Some(Flaw::DoubtOutlivesDeadline)),
        "in doubt",
    );
}

/// The model with renewals that time out (`doubt`): holders whose lease
/// goes in doubt (a renewal timed out, or overdue), and back to held when
/// a renewal is confirmed. No restore (only fencing is checked with one),
/// no death or give-up: neither changes what a holder believes of its own
/// lease.
fn doubting(flaw: Option<Flaw>) -> Protocol {
    Protocol {
        leavers: 0,
        doubt: true,
        ..protocol(false, flaw)
    }
}

/// A lease in doubt: a holder in doubt never believes it holds past its
/// deadline (and exclusion counts it as holding until then), a holder that
/// believes its lease held is never overdue, and a lease in doubt does come
/// back when a renewal is confirmed.
#[test]
fn a_lease_in_doubt_never_outlives_its_deadline() {
    let model = doubting(None);
    let what = format!(
        "model with doubt: {} clients, {} grants each, {} ms, TTL 3 ms, drift {} ms, keys \
         expire up to {} ms early, renewals that time out",
        model.clients, model.grants, model.horizon, model.drift, model.skew
    );
    check_all(&what, model);
}

/// Guarded writes (`Guard::run_if_held`): each holder may write once,
/// believing in its lease or paused past it. A write lands only while the
/// server's key is its writer's, so the writes that land carry rising
/// tokens. A write checked only by the writer's belief (`ensure_held`,
/// then a plain write) is found to land out of turn.
#[test]
fn guarded_writes_land_only_while_their_client_holds_the_lock() {
    // One grant each and nobody leaving: a write's states multiply the
    // rest (about 40 times as many with two grants and a death each).
    let guarded = |flaw| Protocol {
        grants: 1,
        writes: 1,
        leavers: 0,
        ..protocol(false, flaw)
    };
    // 3 ms: a holder's key expires (early) and the next holder writes
    // within it. Two grants each with the full bounds (4.6 million
    // states).
    let model = Protocol {
        grants: if full() { 2 } else { 1 },
        horizon: 3,
        ..guarded(None)
    };
    let what = format!(
        "guarded writes: {} clients, {} grants and 1 write each, {} ms, TTL 3 ms, drift {} ms, \
         keys expire up to {} ms early",
        model.clients, model.grants, model.horizon, model.drift, model.skew
    );
    check_all(&what, model);
    for property in ["guarded writes held", "guarded writes in token order"] {
        let title = format!("UnguardedWrite breaks {property}");
        counterexample(&title, guarded(Some(Flaw::UnguardedWrite)), property);
    }
}

/// Under fair scheduling (see `Fair`), a waiter that stays is granted
/// within a bound: the longest hold before it, plus the TTL of a holder
/// that renewed at its end and died, plus the time until its own next
/// attempt (less than its stay). A grantee that hears of a hand-over too
/// late to take it as it is asks again at once, and finds it its own. The
/// checker also finds the bound tight: one less is broken.
#[test]
fn a_waiter_that_stays_is_granted_under_fair_scheduling() {
    let (ttl, stay, hold) = (3, 2, 3);
    let horizon = if long() { 12 } else { 10 };
    let fair = |bound| Protocol {
        clients: 2,
        ttl,
        stay,
        horizon,
        grants: 2,
        writes: 0,
        leavers: 1,
        restores: false,
        flaw: None,
        drift: DRIFT,
        skew: DRIFT,
        fair: Some(Fair { hold, bound }),
        doubt: false,
        delay: 0,
    };
    let bound = hold + ttl + (stay - 1);
    let what = format!(
        "liveness: 2 clients, 2 grants each, {horizon} ms, TTL {ttl} ms, stay {stay} ms, \
         drift {DRIFT} ms, keys expire up to {DRIFT} ms early, holds of at most {hold} ms: every waiter granted within {bound} ms"
    );
    check_all(&what, fair(bound));
    let title = format!("a waiter waits {bound} ms");
    counterexample(&title, fair(bound - 1), "liveness");
}

/// Lock-delay: with a TTL of 2 ms and a delay of 2 ms, a fresh grant
/// never comes within the delay of the deadline of a holder that still
/// believes (one that stopped renewing: paused), and an attempt in the
/// delay is refused somewhere; an acquire that ignores the mark is found.
#[test]
fn lock_delay_keeps_a_paused_holder_apart_from_the_next() {
    // A tick less than the other checks with the full bounds (a refusal in
    // the delay still fits: grant, expiry at 2, delay to 4): with 5 the
    // check alone took longer than the rest together (107 M states, 283 s
    // on a loaded 2-core machine); `REDMUTEX_MODEL=long` checks 6.
    let delaying = |flaw| {
        let base = protocol(false, flaw);
        Protocol {
            ttl: 2,
            delay: 2,
            horizon: if long() || !full() {
                base.horizon
            } else {
                base.horizon.min(4)
            },
            ..base
        }
    };
    let model = delaying(None);
    let what = format!(
        "lock-delay: {} clients, {} grants each, {} ms, TTL 2 ms, delay 2 ms, stay 2 ms, \
         drift {DRIFT} ms, keys expire up to {DRIFT} ms early",
        model.clients, model.grants, model.horizon
    );
    check_all(&what, model);
    counterexample(
        "IgnoresDelay breaks lock-delay",
        delaying(Some(Flaw::IgnoresDelay)),
        "lock-delay",
    );
}

/// The Redlock bounds: two clients with two attempts each (one less for
/// the first with a data loss, which can come between any two steps), a
/// death (none with a data loss), TTL 3 ms, and time up to 3 ms (2 with a
/// data loss, whose restart takes a millisecond).
fn redlock(loss: Option<Loss>, flaw: Option<redlock::Flaw>) -> Redlock {
    // The small bounds (the README's `cargo test`), in which no time
    // passes, or the full ones.
    let debug = !full();
    let lossless = loss.is_none() && !debug;
    Redlock {
        attempts: if lossless || long() {
            vec![2, 2]
        } else {
            vec![1, 2]
        },
        ttl: 3,
        horizon: if debug {
            1
        } else if lossless || long() {
            3
        } else {
            2
        },
        deaths: u8::from(lossless),
        loss,
        flaw,
        drift: DRIFT,
        skew: DRIFT,
        fast: 0,
        bound: PROPOSAL_BOUND,
        miss_release: false,
    }
}

/// How far a Redlock proposal may lead a master's clock in the model (the
/// library's 2 s against its 1 s lead, below the TTL as there), and how
/// far a fast client clock runs ahead (an hour, against a 3 ms TTL).
const PROPOSAL_BOUND: u64 = 2;
const FAST: u64 = 6;

/// Small Redlock bounds for the checks of one fault: two clients, one
/// attempt each (two for the first with the full bounds), no death.
fn redlock_small(loss: Option<Loss>, flaw: Option<redlock::Flaw>) -> Redlock {
    let debug = !full();
    Redlock {
        attempts: if debug { vec![1, 1] } else { vec![2, 1] },
        horizon: if debug { 1 } else { 2 },
        deaths: 0,
        ..redlock(loss, flaw)
    }
}

/// A client whose clock runs far ahead proposes tokens far ahead; every
/// master then crashes and comes back without data, the TTL later. Tokens
/// keep rising because a master mints a proposal only up to its own clock
/// plus the bound; without the bound they fall.
#[test]
fn redlock_tokens_rise_through_a_fast_client_clock_and_every_masters_restart() {
    let fast = |flaw| Redlock {
        fast: FAST,
        ..redlock_small(Some(Loss::All), flaw)
    };
    let model = fast(None);
    let what = format!(
        "redlock, client 0's clock {FAST} ms fast, every master restarted without data: \
         attempts {:?}, {} ms, TTL {} ms, proposals lead a master's clock by {} ms at most",
        model.attempts, model.horizon, model.ttl, model.bound
    );
    check_all(&what, model);
    counterexample(
        "UnboundedProposal breaks fencing",
        fast(Some(redlock::Flaw::UnboundedProposal)),
        "fencing",
    );
}

/// Master 0 misses a release (it hangs across an unlock): sent again when
/// it answers, the key is gone before any step there meets it; left there,
/// the next grant meets it (as a rival's, for the rest of its TTL).
#[test]
fn redlock_a_release_a_master_missed_leaves_no_key_behind() {
    let missing = |flaw| Redlock {
        miss_release: true,
        ..redlock_small(None, flaw)
    };
    let model = missing(None);
    let what = format!(
        "redlock, master 0 misses a release: attempts {:?}, {} ms, TTL {} ms",
        model.attempts, model.horizon, model.ttl
    );
    check_all(&what, model);
    counterexample(
        "LostReleaseStays breaks no leftover",
        missing(Some(redlock::Flaw::LostReleaseStays)),
        "no leftover",
    );
}

#[test]
fn redlock_keeps_its_properties_through_one_masters_data_loss() {
    for loss in [None, Some(Loss::Flush), Some(Loss::Restore)] {
        let model = redlock(loss, None);
        let what = format!(
            "redlock, {} masters, data loss {loss:?}: attempts {:?}, {} ms, TTL {} ms, \
             drift {DRIFT} ms, keys expire up to {DRIFT} ms early, {} death",
            redlock::MASTERS,
            model.attempts,
            model.horizon,
            model.ttl,
            model.deaths
        );
        check_all(&what, model);
    }
}

/// Without the write-back that takes the free masters (a grant kept on a
/// bare majority), one master's flush lets a rival in.
#[test]
fn a_grant_kept_on_a_bare_majority_is_found() {
    // Small bounds suffice: no time passes, no one dies.
    let model = Redlock {
        horizon: 1,
        deaths: 0,
        ..redlock(Some(Loss::Flush), Some(redlock::Flaw::BareMajority))
    };
    counterexample("BareMajority breaks exclusion", model, "exclusion");
}

/// A grant without the write-back when only a majority minted one token
/// (not every master): the master it did not get is not taken, and one
/// master's flush lets a rival in, as with a bare majority.
#[test]
fn no_write_back_for_a_majority_of_one_token_is_found() {
    let model = Redlock {
        horizon: 1,
        deaths: 0,
        ..redlock(Some(Loss::Flush), Some(redlock::Flaw::OneTokenOnMajority))
    };
    counterexample("OneTokenOnMajority breaks exclusion", model, "exclusion");
}

/// A drift allowance smaller than the clocks' real difference: the server
/// expires the key while its holder still believes in its lease, and a
/// rival is granted. Found in both protocols.
#[test]
fn a_drift_allowance_below_the_clocks_difference_is_found() {
    let single = Protocol {
        drift: 0,
        ..protocol(false, None)
    };
    counterexample("no drift allowance breaks exclusion", single, "exclusion");
    // One attempt each and no deaths: small enough for a debug build,
    // with time to reach the keys' expiry.
    let redlock = Redlock {
        attempts: vec![1, 1],
        horizon: 3,
        drift: 0,
        deaths: 0,
        ..redlock(None, None)
    };
    counterexample(
        "no drift allowance breaks Redlock's exclusion",
        redlock,
        "exclusion",
    );
}
