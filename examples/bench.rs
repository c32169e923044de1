//! Benchmark: redmutex against a raw redis-rs lock loop, in one process, on
//! local `redis-server`s it starts itself. Prints ratios to the baseline
//! measured in the same run, so the figures compare like with like.
//!
//! ```text
//! cargo run --release --example bench            # everything, about two minutes
//! cargo run --release --example bench -- quick   # shorter runs
//! cargo run --release --example bench -- 1 2      # only sections 1 and 2
//! cargo run --release --example bench -- pinned   # server on CPU 0, clients on CPU 1
//! cargo run --release --example bench -- compare c2eaaad   # this tree against 0.1
//! ```
//!
//! `compare <git rev> [pinned|unpinned|both] [rounds N] [quick]` measures
//! this tree against another revision: it checks the revision out in a git
//! worktree outside the tree, builds `bench/figures.rs` (this tree's, the
//! same program for both) against each library in release, runs the two
//! alternately, a fresh server per round, pinned and unpinned, and prints
//! each figure's medians, its ratio new/old and the run-to-run spread: A
//! (uncontended cycle), the server's CPU per cycle, B (4 workers, 0 ms), C
//! (4 workers, 2 ms), the hand-over p50/p99, and `INFO commandstats` per
//! cycle. Any revision from 0.1 (c2eaaad) on works as the old side; see
//! `bench/compare.rs`.
//!
//! `pinned` (Linux, two CPUs or more) runs the `redis-server`s it starts on
//! CPU 0 and this process, every thread of it (the library's watchdogs and
//! listener too), on CPU 1, as the peer benchmark does with `taskset`:
//! the client's own threads then compete for one CPU.
//!
//! 1. uncontended: lock + unlock cycles/s, raw loop vs redmutex (and
//!    without its watchdog); the server's CPU time per cycle (`INFO cpu`)
//!    of each, and the commands per redmutex cycle (`INFO commandstats`);
//! 2. contended: 4 threads over 2 lockers on one key, 0 ms and 2 ms critical
//!    sections: acquisitions/s, wait p50/p99/max, fairness (max/min
//!    acquisitions per worker), and the hand-over latency (a release sent
//!    to the next holder's lock returning, for a holder that waited) p50
//!    and p99, next to a PING round trip measured in the same run, and the
//!    hand-over alone (one waiter on another locker, 2,000 rounds); then the
//!    same redmutex rows on a Redis Cluster of 3 masters started here (the
//!    waiters woken through sharded pub/sub), with the cluster's hand-over
//!    p50 as a ratio to the single server's;
//! 3. Redlock over 3 and 5 local masters: cycle ratio to one instance; and
//!    over 3 masters each behind a 1 ms one-way delay (a proxy in this
//!    process), against one behind the same delay;
//! 4. 10,000 held guards: resident memory, threads, renewals/s, leases lost;
//! 5. a 4-permit semaphore, read holds and write holds of a read-write
//!    lock, each under 8 threads over 2 lockers, next to the mutex under the
//!    same 8 threads: acquisitions/s (each hold one INCR);
//! 6. the live figures' cost: uncontended lock + unlock with stats recorded
//!    (the default) against `Builder::stats(false)`, in alternating chunks,
//!    5 rounds: each round's cycle time ratio and their median. Built with
//!    `--features metrics`, "on" reports to a Prometheus recorder as well:
//!    run both builds one after the other to compare.
//!
//! The quick profile holds 2,000 guards for 9 s instead of 10,000 for 18 s.

// Finds a Redis server, or starts a throw-away one.
use redmutex_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use redis::{Commands, Script};
use redmutex::Locker;
use support::proxy::Proxy;
use support::ThrowAwayServer;

// The figures any revision can be measured by (sections 1 and 2 use them),
// and `bench compare`.
#[path = "bench/compare.rs"]
mod compare;
#[path = "bench/figures.rs"]
mod figures;

use figures::{
    alternating, contended, pause, percentile, pin_to, process_cpu, raw_cycle, round_trip,
    Contended, Cycle, Mode, Res, CAD,
};

/// Set in a pinned run: every server started goes on CPU 0.
static PINNED: AtomicBool = AtomicBool::new(false);

fn start_server() -> Res<ThrowAwayServer> {
    let server = ThrowAwayServer::start(&[], Duration::from_secs(20))?;
    if PINNED.load(Ordering::SeqCst) {
        pin_server(server.pid())?;
    }
    Ok(server)
}

/// Uncontended cycles per second of `cycle`, run for `run`.
fn rate(run: Duration, mut cycle: impl FnMut() -> Res<()>) -> Res<f64> {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < run {
        cycle()?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Cycles per second of the raw loop, of redmutex, and of redmutex
/// without the watchdog, measured in alternating chunks of 50 cycles for
/// `3 * run` each (see `figures::alternating`); first the CPU time per
/// cycle of the raw loop and of redmutex, alternating chunks of 500: the
/// server's (`INFO cpu`) and this process's (every thread of it, the
/// library's too), and the server's commands per redmutex cycle.
fn uncontended(url: &str, run: Duration) -> Res<(f64, f64, f64)> {
    let pool = redmutex::pool(url)?;
    let cad = Script::new(CAD);
    let locker = Locker::builder(redmutex::pool(url)?).build()?;
    let bare = Locker::builder(redmutex::pool(url)?)
        .watchdog(false)
        .build()?;
    let mut raw = || raw_cycle(&pool, &cad, "bench:u:raw");
    let mut ours = || -> Res<()> { Ok(locker.lock("bench:u:ours")?.unlock()?) };
    let mut without = || -> Res<()> { Ok(bare.lock("bench:u:bare")?.unlock()?) };
    // Warm them up (connections, scripts loaded) before timing.
    for _ in 0..50 {
        raw()?;
        ours()?;
        without()?;
    }
    let mut admin = redis::Client::open(url)?.get_connection()?;
    let client = process_cpu();
    let cpu = figures::server_cpu_per_cycle(
        &mut admin,
        &mut [&mut raw as Cycle<'_>, &mut ours],
        500,
        3000,
    )?;
    let client = process_cpu().zip(client).map_or_else(
        || "?".to_owned(),
        |(end, start)| format!("{:.1}µs", (end - start) / 6000.0),
    );
    let cpu_of = |i: usize| cpu.get(i).copied().unwrap_or(f64::NAN);
    println!(
        "   server CPU per cycle (INFO cpu): raw {:.1}µs, redmutex {:.1}µs: ratio {:.2} \
         (target: 1.25 or less); this process, both loops: {client} a cycle",
        cpu_of(0),
        cpu_of(1),
        cpu_of(1) / cpu_of(0)
    );
    let commands = figures::commands_per_cycle(&mut admin, 2000, &mut ours)?;
    let listed: Vec<String> = commands
        .iter()
        .map(|(name, calls, usec)| format!("{name} {calls:.2} ({usec:.1}µs)"))
        .collect();
    println!("   commands per redmutex cycle: {}", listed.join(", "));
    let (spent, n) = alternating(
        &mut [&mut raw as Cycle<'_>, &mut ours, &mut without],
        50,
        run * 3,
    )?;
    let per_sec = |i: usize| {
        spent
            .get(i)
            .map_or(f64::NAN, |d| n as f64 / d.as_secs_f64())
    };
    Ok((per_sec(0), per_sec(1), per_sec(2)))
}

/// A thread's wake-up on this machine: one thread sends the time on a
/// channel to another, which is blocked on it; the time until the other
/// runs, p50 and p99 over `n`, each after `idle` with both blocked (a
/// virtual CPU left idle may take longer to come back). A hand-over has
/// two on its path (the release listener's, then the waiter's).
fn wake_up(n: usize, idle: Duration) -> Res<(Duration, Duration)> {
    let (to_sleeper, sleeper) = std::sync::mpsc::channel::<Instant>();
    let (to_main, main) = std::sync::mpsc::channel::<Duration>();
    let t = std::thread::Builder::new()
        .name("wake-up".into())
        .spawn(move || {
            for sent in sleeper {
                if to_main.send(sent.elapsed()).is_err() {
                    break;
                }
            }
        })?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        // Let the other thread block first.
        pause(idle);
        to_sleeper.send(Instant::now())?;
        times.push(main.recv()?);
    }
    drop(to_sleeper);
    t.join().map_err(|_| "the wake-up thread panicked")?;
    times.sort();
    Ok((percentile(&times, 500), percentile(&times, 990)))
}

/// Pins the server (`server_pid`) to CPU 0 and this process (every thread
/// it starts from now on) to CPU 1.
fn pin(server_pid: u32) -> Res<()> {
    pin_server(server_pid)?;
    pin_to(0, 1)?;
    PINNED.store(true, Ordering::SeqCst);
    Ok(())
}

/// Puts a server on CPU 0 (one this pinned process started inherits CPU 1).
fn pin_server(pid: u32) -> Res<()> {
    pin_to(i32::try_from(pid)?, 0)
}

fn print_contended(name: &str, c: &Contended) {
    println!(
        "   {name:<9} {:>7.0} acq/s  wait p50 {:>9.3?}  p99 {:>9.3?}  max {:>9.3?}  fairness {:.2}  \
         hand-over p50 {:>9.3?}  p99 {:>9.3?}",
        c.per_sec, c.p50, c.p99, c.max, c.fairness, c.handover.0, c.handover.1
    );
    println!(
        "   {:<9} server time in commands {:.1}µs per acquisition, {:.1}µs per EVALSHA",
        "", c.server.0, c.server.1
    );
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "compare") {
        return compare::compare(args.get(1..).unwrap_or_default());
    }
    let quick = std::env::args().any(|a| a == "quick");
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a.parse::<u8>().is_ok())
        .collect();
    let runs = |section: &str| chosen.is_empty() || chosen.iter().any(|c| c == section);
    let run = if quick {
        Duration::from_millis(700)
    } else {
        Duration::from_secs(2)
    };
    let pinned = std::env::args().any(|a| a == "pinned");
    // Before pinning, which narrows what this process may see.
    let machine = machine();
    let server = start_server()?;
    let url = server.url();
    if pinned {
        pin(server.pid())?;
    }
    let how = if pinned {
        "pinned: server on CPU 0, this process on CPU 1"
    } else {
        "unpinned"
    };
    println!("redmutex bench: {machine}, {how}");

    if runs("1") {
        println!("\n1. uncontended lock + unlock");
        let (raw, ours, without) = uncontended(&url, run)?;
        println!("   raw SET NX PX + EVALSHA compare-and-delete: {raw:>8.0} cycles/s");
        println!("   redmutex lock + unlock (watchdog on):       {ours:>8.0} cycles/s");
        println!("   redmutex lock + unlock (watchdog off):      {without:>8.0} cycles/s");
        println!(
            "   cycle time ratio redmutex/raw: {:.2} (target: 1.10 or less); without the watchdog {:.2}",
            raw / ours,
            raw / without
        );
        println!(
            "   cycle time: raw {:.1}µs, redmutex {:.1}µs, without the watchdog {:.1}µs",
            1e6 / raw,
            1e6 / ours,
            1e6 / without
        );
    }
    if runs("2") {
        contention(&url, run)?;
    }
    if runs("3") {
        redlock(&server, run)?;
    }
    if runs("4") {
        let guards = if quick { 2_000 } else { 10_000 };
        let ttl = Duration::from_secs(if quick { 3 } else { 6 });
        println!("\n4. {guards} guards held for 3 x TTL ({ttl:?}), watchdogs on");
        held_guards(guards, ttl)?;
    }
    if runs("5") {
        primitives(&url, run)?;
    }
    if runs("6") {
        stats_cost(&url, run)?;
    }
    Ok(())
}

/// Section 6: uncontended cycles with the live figures recorded and
/// without, alternating chunks of 20 (see [`alternating`]), in 5 rounds.
fn stats_cost(url: &str, run: Duration) -> Res<()> {
    println!("\n6. live figures: uncontended lock + unlock, stats on (default) vs off");
    // Built with `--features metrics`: "on" reports each event to a
    // Prometheus recorder too, as a service exporting them would.
    #[cfg(feature = "metrics")]
    let handle = {
        println!("   (the `metrics` feature on: reported to a Prometheus recorder)");
        metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?
    };
    #[cfg(not(feature = "metrics"))]
    println!("   (the `metrics` feature off)");
    let on = Locker::builder(redmutex::pool(url)?).build()?;
    let off = Locker::builder(redmutex::pool(url)?).stats(false).build()?;
    let mut ratios = Vec::new();
    for round in 1..=5 {
        let (with, without) = alternate(
            run,
            || Ok(on.lock("bench:s:on")?.unlock()?),
            || Ok(off.lock("bench:s:off")?.unlock()?),
        )?;
        let ratio = without / with;
        println!(
            "   round {round}: on {with:>7.0} cycles/s, off {without:>7.0}: cycle time ratio on/off {ratio:.3}"
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
    println!("   median cycle time ratio on/off: {median:.3} (target: 1.02 or less)");
    let s = on.stats();
    println!("   the stats-on locker's own figures: {s}");
    #[cfg(feature = "metrics")]
    {
        let grants = handle
            .render()
            .lines()
            .filter(|l| l.starts_with("redmutex_grants_total"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .join(", ");
        println!("   and as the recorder has them: {grants}");
    }
    Ok(())
}

/// Section 2: the contended runs, raw loop and redmutex.
fn contention(url: &str, run: Duration) -> Res<()> {
    println!("\n2. contended: 4 threads over 2 lockers (2 pools) on one key");
    let (rtt50, rtt99) = round_trip(url, 2000, Duration::ZERO)?;
    println!("   PING round trip: p50 {rtt50:.3?}, p99 {rtt99:.3?}");
    // Client and server idle for a critical section's length first: on a
    // virtual machine, CPUs left idle take a while to come back.
    let (idle50, idle99) = round_trip(url, 500, Duration::from_millis(2))?;
    println!("   PING round trip after 2ms idle: p50 {idle50:.3?}, p99 {idle99:.3?}");
    for idle in [Duration::from_micros(200), Duration::from_millis(2)] {
        let (wake50, wake99) = wake_up(1000, idle)?;
        println!(
            "   a blocked thread's wake-up after {idle:?} idle: p50 {wake50:.3?}, p99 {wake99:.3?}"
        );
    }
    let (h50, h99) = figures::handover(
        url,
        if run < Duration::from_secs(1) {
            500
        } else {
            2000
        },
    )?;
    println!(
        "   hand-over alone (release call -> the waiter's lock returns; another locker, one \
         waiter): p50 {h50:.3?} = 1 round trip + {:.3?} (target: + 50µs or less), p99 {h99:.3?}",
        h50.saturating_sub(rtt50)
    );
    let raw_modes = [
        Mode::Raw(redmutex::pool(url)?),
        Mode::Raw(redmutex::pool(url)?),
    ];
    let our_modes = [
        Mode::Ours(Locker::open(url)?),
        Mode::Ours(Locker::open(url)?),
    ];
    let (cluster, dir) = start_cluster()?;
    let urls: Vec<String> = cluster.iter().map(ThrowAwayServer::url).collect();
    let cluster_modes = [
        Mode::Ours(Locker::open_cluster(&urls)?),
        Mode::Ours(Locker::open_cluster(&urls)?),
    ];
    // The node that serves the workers' counter, which they read and
    // write on a plain connection.
    let counter_url = urls
        .iter()
        .find(|u| {
            redis::Client::open(u.as_str())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| {
                    redis::cmd("GET")
                        .arg("bench:c:counter")
                        .query::<Option<u64>>(&mut c)
                })
                .is_ok()
        })
        .ok_or("no node serves bench:c:counter")?;
    for hold in [Duration::ZERO, Duration::from_millis(2)] {
        println!("   critical section {hold:?}:");
        let raw = contended(url, run * 2, hold, &raw_modes)?;
        let ours = contended(url, run * 2, hold, &our_modes)?;
        let clustered = contended(counter_url, run * 2, hold, &cluster_modes)?;
        print_contended("raw", &raw);
        print_contended("redmutex", &ours);
        let c = &clustered;
        println!(
            "   {:<9} {:>7.0} acq/s  wait p50 {:>9.3?}  p99 {:>9.3?}  max {:>9.3?}  fairness {:.2}  \
             hand-over p50 {:>9.3?}  p99 {:>9.3?}",
            "cluster", c.per_sec, c.p50, c.p99, c.max, c.fairness, c.handover.0, c.handover.1
        );
        println!(
            "   cluster (3 masters, sharded pub/sub) / single server: hand-over p50 {:.2} \
             (target: 1.30 or less), p99 {:.2}",
            c.handover.0.as_secs_f64() / ours.handover.0.as_secs_f64(),
            c.handover.1.as_secs_f64() / ours.handover.1.as_secs_f64()
        );
        println!(
            "   ratios redmutex/raw: throughput {:.2}, p99 wait {:.2}, max wait {:.2}",
            ours.per_sec / raw.per_sec,
            ours.p99.as_secs_f64() / raw.p99.as_secs_f64(),
            ours.max.as_secs_f64() / raw.max.as_secs_f64(),
        );
        println!(
            "   redmutex hand-over p50: {:.3?} = 1 round trip + {:.3?} (target: + 50µs or less)",
            ours.handover.0,
            ours.handover.0.saturating_sub(rtt50)
        );
        if !hold.is_zero() {
            // Here the release follows an idle stretch, as that PING did.
            println!(
                "   the same against a round trip after 2ms idle: + {:.3?}",
                ours.handover.0.saturating_sub(idle50)
            );
        }
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// A Redis Cluster of 3 masters (no replicas) started here, ready, and
/// the directory of its nodes' files.
fn start_cluster() -> Res<(Vec<ThrowAwayServer>, std::path::PathBuf)> {
    let (nodes, dir) = support::cluster::start_cluster(0, &[], Duration::from_secs(20))?;
    if PINNED.load(Ordering::SeqCst) {
        for node in &nodes {
            pin_server(node.pid())?;
        }
    }
    Ok((nodes, dir))
}

/// Section 3: Redlock over 3 and 5 local masters against one instance,
/// then over 3 masters each behind a 1 ms one-way delay against one
/// instance behind the same delay (as masters on other hosts would be).
fn redlock(server: &ThrowAwayServer, run: Duration) -> Res<()> {
    let url = &server.url();
    println!("\n3. Redlock: uncontended lock + unlock, ratio of cycle time to one instance");
    let single = Locker::open(url)?;
    let one = rate(run, || {
        single.lock("bench:r")?.unlock()?;
        Ok(())
    })?;
    let extra: Vec<ThrowAwayServer> = (0..4).map(|_| start_server()).collect::<Res<_>>()?;
    for n in [3usize, 5] {
        let mut b = Locker::builder(redmutex::pool(url)?);
        for s in extra.iter().take(n - 1) {
            b = b.instance(redmutex::pool(&s.url())?);
        }
        let redlock = b.build()?;
        let r = rate(run, || {
            redlock.lock("bench:r")?.unlock()?;
            Ok(())
        })?;
        println!(
            "   {n} masters: {r:>8.0} cycles/s against {one:.0} on one: cycle time ratio {:.2}",
            one / r
        );
    }
    let delay = Duration::from_millis(1);
    let proxies: Vec<Proxy> = std::iter::once(server)
        .chain(extra.iter().take(2))
        .map(|s| Proxy::with_delay(s.port(), delay))
        .collect();
    let far = |p: &Proxy| redmutex::pool(&p.url());
    let (first, rest) = proxies.split_first().ok_or("no proxy")?;
    let single = Locker::open(&first.url())?;
    let mut b = Locker::builder(far(first)?);
    for p in rest {
        b = b.instance(far(p)?);
    }
    let redlock = b.build()?;
    let (one, three) = alternate(
        run * 2,
        || Ok(single.lock("bench:far")?.unlock()?),
        || Ok(redlock.lock("bench:far")?.unlock()?),
    )?;
    println!(
        "   behind a {delay:?} one-way delay: 3 masters {three:>6.0} cycles/s against {one:.0} \
         on one: cycle time ratio {:.2} (target: 1.30 or less)",
        one / three
    );
    Ok(())
}

/// Cycles per second of `a` and of `b`, run in alternating chunks of 20
/// cycles for `run` each, so that drift in the machine's load hits both.
fn alternate(
    run: Duration,
    mut a: impl FnMut() -> Res<()>,
    mut b: impl FnMut() -> Res<()>,
) -> Res<(f64, f64)> {
    let (spent, n) = alternating(&mut [&mut a as Cycle<'_>, &mut b], 20, run)?;
    let per_sec = |i: usize| {
        spent
            .get(i)
            .map_or(f64::NAN, |d| n as f64 / d.as_secs_f64())
    };
    Ok((per_sec(0), per_sec(1)))
}

/// A line of /proc/self/status, e.g. "VmRSS" or "Threads".
fn status(field: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(&format!("{field}:"))
                    .map(|v| v.trim().to_owned())
            })
        })
        .unwrap_or_else(|| "?".into())
}

fn held_guards(count: usize, ttl: Duration) -> Res<()> {
    // A server of its own, so only these renewals are counted.
    let server = start_server()?;
    let locker = Locker::builder(redmutex::pool(&server.url())?)
        .ttl(ttl)
        .build()?;
    let evalsha = |c: &mut redis::Connection| -> Res<u64> {
        let info: String = redis::cmd("INFO").arg("commandstats").query(c)?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    };
    let mut admin = redis::Client::open(server.url())?.get_connection()?;
    let (rss_before, threads_before) = (status("VmRSS"), status("Threads"));
    let start = Instant::now();
    let held = (0..count)
        .map(|i| locker.lock(&format!("bench:held:{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    println!("   took {count} locks in {:?}", start.elapsed());
    let calls_before = evalsha(&mut admin)?;
    let hold_start = Instant::now();
    pause(ttl * 3);
    let renewals = evalsha(&mut admin)?.saturating_sub(calls_before);
    let per_sec = renewals as f64 / hold_start.elapsed().as_secs_f64();
    let lost = held.iter().filter(|g| g.is_lost()).count();
    let keys: u64 = redis::cmd("DBSIZE").query(&mut admin)?;
    println!(
        "   resident memory {} (before: {rss_before}), threads {} (before: {threads_before})",
        status("VmRSS"),
        status("Threads")
    );
    println!(
        "   renewals {per_sec:.0}/s, leases lost {lost}, lock keys still in Redis {}",
        keys.saturating_sub(1)
    );
    let start = Instant::now();
    drop(held);
    println!("   released all in {:?}", start.elapsed());
    Ok(())
}

/// CPU model and core count, from /proc (Linux), for the figures' record.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cores} cores, {model}")
}

/// What a worker of section 5 takes.
#[derive(Clone)]
enum Hold {
    Lock(Locker),
    Permit(redmutex::Semaphore),
    Read(redmutex::RwLock),
    Write(redmutex::RwLock),
}

/// 8 workers over 2 lockers: take, INCR a counter, release, for `run`.
/// Acquisitions per second.
fn hold_rate(url: &str, run: Duration, holds: &[Hold]) -> Res<f64> {
    const WORKERS: usize = 8;
    let client = redis::Client::open(url)?;
    let _: () = client.get_connection()?.set("bench:p:counter", 0)?;
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(WORKERS + 1));
    let mut threads = Vec::new();
    for w in 0..WORKERS {
        let hold = holds.get(w % holds.len()).cloned().ok_or("no hold")?;
        let mut conn = client.get_connection()?;
        let (stop, barrier) = (Arc::clone(&stop), Arc::clone(&barrier));
        let mut body = move || -> Res<u64> {
            let mut n = 0;
            barrier.wait();
            while !stop.load(Ordering::Relaxed) {
                let guard = match &hold {
                    Hold::Lock(locker) => locker.lock("bench:p:lock")?,
                    Hold::Permit(sem) => sem.acquire()?,
                    Hold::Read(rw) => rw.read()?,
                    Hold::Write(rw) => rw.write()?,
                };
                let _: u64 = conn.incr("bench:p:counter", 1)?;
                guard.unlock()?;
                n += 1;
            }
            Ok(n)
        };
        threads.push(
            std::thread::Builder::new()
                .name(format!("holder-{w}"))
                .spawn(move || body().map_err(|e| e.to_string()))?,
        );
    }
    barrier.wait();
    let start = Instant::now();
    pause(run);
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in threads {
        total += t.join().map_err(|_| "worker panicked")??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Section 5: the semaphore and the read-write lock next to the mutex, in
/// the same run.
fn primitives(url: &str, run: Duration) -> Res<()> {
    println!("\n5. 8 threads over 2 lockers, each hold one INCR");
    let lockers = [Locker::open(url)?, Locker::open(url)?];
    let mutex: Vec<Hold> = lockers.iter().cloned().map(Hold::Lock).collect();
    let permits = lockers
        .iter()
        .map(|l| Ok(Hold::Permit(l.semaphore("bench:p:sem", 4)?)))
        .collect::<Res<Vec<Hold>>>()?;
    let rw = lockers
        .iter()
        .map(|l| l.rwlock("bench:p:rw"))
        .collect::<Result<Vec<_>, _>>()?;
    let reads: Vec<Hold> = rw.iter().cloned().map(Hold::Read).collect();
    let writes: Vec<Hold> = rw.iter().cloned().map(Hold::Write).collect();
    let m = hold_rate(url, run * 2, &mutex)?;
    println!("   mutex:                {m:>8.0} acq/s");
    for (what, holds) in [
        ("semaphore, 4 permits:", &permits),
        ("rwlock, read holds:  ", &reads),
        ("rwlock, write holds: ", &writes),
    ] {
        let r = hold_rate(url, run * 2, holds)?;
        println!("   {what} {r:>8.0} acq/s ({:.2}x the mutex)", r / m);
    }
    Ok(())
}
