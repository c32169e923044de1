//! Benchmark: redmutex against a raw redis-rs lock loop, in one process, on
//! local `redis-server`s it starts itself. Prints ratios to the baseline
//! measured in the same run, so the figures compare like with like.
//!
//! ```text
//! cargo run --release --example bench            # everything, about two minutes
//! cargo run --release --example bench -- quick   # shorter runs
//! cargo run --release --example bench -- 1 2      # only sections 1 and 2
//! cargo run --release --example bench -- pinned   # server on CPU 0, clients on CPU 1
//! ```
//!
//! `pinned` (Linux, two CPUs or more) runs the `redis-server`s it starts on
//! CPU 0 and this process, every thread of it (the library's watchdogs and
//! listener too), on CPU 1, as the peer benchmark does with `taskset`:
//! the client's own threads then compete for one CPU.
//!
//! 1. uncontended: lock + unlock cycles/s, raw loop vs redmutex;
//! 2. contended: 4 threads over 2 lockers on one key, 0 ms and 2 ms critical
//!    sections: acquisitions/s, wait p50/p99/max, fairness (max/min
//!    acquisitions per worker), and the hand-over latency (a release sent
//!    to the next holder's lock returning, for a holder that waited) p50
//!    and p99, next to a PING round trip measured in the same run; then the
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

use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use redis::{Commands, Script};
use redmutex::Locker;
use support::proxy::Proxy;
use support::ThrowAwayServer;

type Res<T> = Result<T, Box<dyn Error>>;

/// The baseline's release: the usual compare-and-delete script.
const CAD: &str =
    r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// Set in a pinned run: every server started goes on CPU 0.
static PINNED: AtomicBool = AtomicBool::new(false);

fn start_server() -> Res<ThrowAwayServer> {
    let server = ThrowAwayServer::start(&[], Duration::from_secs(20))?;
    if PINNED.load(Ordering::SeqCst) {
        pin_server(server.pid())?;
    }
    Ok(server)
}

/// One raw acquisition attempt: SET key token NX PX 30000.
fn raw_try(conn: &mut redis::Connection, key: &str, token: &str) -> Res<bool> {
    let ok: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query(conn)?;
    Ok(ok.is_some())
}

fn raw_release(conn: &mut redis::Connection, cad: &Script, key: &str, token: &str) -> Res<()> {
    let _: i64 = cad.key(key).arg(token).invoke(conn)?;
    Ok(())
}

/// Waits `d` without a busy loop (a channel nobody sends on).
fn pause(d: Duration) {
    let (_tx, rx) = std::sync::mpsc::channel::<()>();
    let _ = rx.recv_timeout(d);
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

/// Cycles per second of the raw loop and of redmutex, measured in
/// alternating chunks of 50 cycles for `3 * run` each: drift in the machine's
/// load (other processes, CPU frequency) then hits both alike, where whole
/// runs one after the other differed by up to 20% on the same code.
fn uncontended(url: &str, run: Duration) -> Res<(f64, f64, f64)> {
    const CHUNK: u32 = 50;
    let pool = redmutex::pool(url)?;
    let cad = Script::new(CAD);
    let locker = Locker::builder(redmutex::pool(url)?).build()?;
    let bare = Locker::builder(redmutex::pool(url)?)
        .watchdog(false)
        .build()?;
    let raw_cycle = |n: u32| -> Res<()> {
        let mut c = pool.get_timeout(Duration::from_secs(2))?;
        let token = format!("raw-{n}");
        if !raw_try(&mut c, "bench:u:raw", &token)? {
            return Err("raw lock unexpectedly busy".into());
        }
        raw_release(&mut c, &cad, "bench:u:raw", &token)
    };
    let our_cycle = || -> Res<()> {
        let g = locker.lock("bench:u:ours")?;
        g.unlock()?;
        Ok(())
    };
    let bare_cycle = || -> Res<()> {
        let g = bare.lock("bench:u:bare")?;
        g.unlock()?;
        Ok(())
    };
    // Warm them up (connections, scripts loaded) before timing.
    for n in 0..CHUNK {
        raw_cycle(n)?;
        our_cycle()?;
        bare_cycle()?;
    }
    // CPU time per cycle: the server's (INFO cpu) and this process's,
    // every thread of it (the library's too).
    const COUNTED: u32 = 3000;
    let raw_once = || raw_cycle(0);
    let cycles: [(&str, &dyn Fn() -> Res<()>); 2] = [("raw", &raw_once), ("redmutex", &our_cycle)];
    for (name, cycle) in cycles {
        let mut c = pool.get_timeout(Duration::from_secs(2))?;
        let (server, client) = (server_cpu(&mut c)?, process_cpu());
        for _ in 0..COUNTED {
            cycle()?;
        }
        let server = (server_cpu(&mut c)? - server) / f64::from(COUNTED);
        let client = process_cpu().map(|end| (end - client.unwrap_or(end)) / f64::from(COUNTED));
        let client = client.map_or_else(|| "?".to_owned(), |us| format!("{us:.1}µs"));
        println!("   CPU per cycle, {name:<8}: server {server:.1}µs, this process {client}");
    }
    let (mut raw, mut ours, mut without) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut cycles = 0u64;
    while raw + ours < run * 6 {
        let t = Instant::now();
        for n in 0..CHUNK {
            raw_cycle(n)?;
        }
        raw += t.elapsed();
        let t = Instant::now();
        for _ in 0..CHUNK {
            our_cycle()?;
        }
        ours += t.elapsed();
        let t = Instant::now();
        for _ in 0..CHUNK {
            bare_cycle()?;
        }
        without += t.elapsed();
        cycles += u64::from(CHUNK);
    }
    let per_sec = |d: Duration| cycles as f64 / d.as_secs_f64();
    Ok((per_sec(raw), per_sec(ours), per_sec(without)))
}

/// The server's CPU time so far (user and system, `INFO cpu`), in µs.
fn server_cpu(c: &mut redis::Connection) -> Res<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query(c)?;
    let seconds: f64 = info
        .lines()
        .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum();
    Ok(seconds * 1e6)
}

/// This process's CPU time so far, every thread's (the first field of each
/// `/proc/self/task/*/schedstat`, in ns), in µs. Threads that ended are
/// not counted: the bench's threads outlive the measurement. None off Linux.
fn process_cpu() -> Option<f64> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let ns: u64 = tasks
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    Some(ns as f64 / 1e3)
}

/// What one contended run measured.
struct Contended {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
    fairness: f64,
    /// Release sent → the next holder's lock returned (a waiter's), p50
    /// and p99.
    handover: (Duration, Duration),
    /// The server's time in commands (`INFO commandstats`) per acquisition,
    /// and per `EVALSHA` (the scripts, with the calls they make), in µs.
    server: (f64, f64),
}

/// The `permille`th of `sorted` (sorted ascending).
fn percentile(sorted: &[Duration], permille: usize) -> Duration {
    let i = sorted.len().saturating_sub(1) * permille / 1000;
    sorted.get(i).copied().unwrap_or_default()
}

/// How a contended worker takes the lock.
#[derive(Clone)]
enum Mode {
    /// SET NX PX, retried every 1 ms; compare-and-delete to release.
    Raw(r2d2::Pool<redis::Client>),
    /// `Locker::lock` / `Guard::unlock`.
    Ours(Locker),
}

/// 4 workers on one key: lock, GET a counter, hold, SET it, unlock. Runs
/// for `run`; fairness is max/min acquisitions per worker.
fn contended(url: &str, run: Duration, hold: Duration, modes: &[Mode]) -> Res<Contended> {
    const WORKERS: usize = 4;
    let client = redis::Client::open(url)?;
    let _: () = client.get_connection()?.set("bench:c:counter", 0)?;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut client.get_connection()?)?;
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(WORKERS + 1));
    // When the latest release was sent, in ns from `base` (0: none yet).
    let base = Instant::now();
    let released = Arc::new(AtomicU64::new(0));
    let since_base = move || u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut threads = Vec::new();
    for w in 0..WORKERS {
        let mode = modes.get(w % modes.len()).cloned().ok_or("no mode")?;
        let mut conn = client.get_connection()?;
        let (stop, barrier, released) = (
            Arc::clone(&stop),
            Arc::clone(&barrier),
            Arc::clone(&released),
        );
        let mut body = move || -> Res<(Vec<Duration>, Vec<Duration>)> {
            let cad = Script::new(CAD);
            let token = format!("worker-{w}");
            let (mut waits, mut handovers) = (Vec::new(), Vec::new());
            barrier.wait();
            while !stop.load(Ordering::Relaxed) {
                let asked_ns = since_base();
                let asked = Instant::now();
                let guard = match &mode {
                    Mode::Raw(pool) => {
                        while !raw_try(
                            &mut *pool.get_timeout(Duration::from_secs(2))?,
                            "bench:c:lock",
                            &token,
                        )? {
                            pause(Duration::from_millis(1));
                        }
                        None
                    }
                    Mode::Ours(locker) => Some(locker.lock("bench:c:lock")?),
                };
                waits.push(asked.elapsed());
                // A waiter that got the lock after a release sent while it
                // waited: how long the hand-over took.
                let (got, release) = (since_base(), released.load(Ordering::SeqCst));
                if release > asked_ns {
                    handovers.push(Duration::from_nanos(got.saturating_sub(release)));
                }
                let v: u64 = conn.get("bench:c:counter")?;
                if !hold.is_zero() {
                    pause(hold);
                }
                let _: () = conn.set("bench:c:counter", v + 1)?;
                released.store(since_base(), Ordering::SeqCst);
                match (guard, &mode) {
                    (Some(g), _) => g.unlock()?,
                    (None, Mode::Raw(pool)) => raw_release(
                        &mut *pool.get_timeout(Duration::from_secs(2))?,
                        &cad,
                        "bench:c:lock",
                        &token,
                    )?,
                    (None, Mode::Ours(_)) => return Err("no guard".into()),
                }
            }
            Ok((waits, handovers))
        };
        threads.push(
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || body().map_err(|e| e.to_string()))?,
        );
    }
    barrier.wait();
    let start = Instant::now();
    pause(run);
    stop.store(true, Ordering::Relaxed);
    let (mut all, mut handovers) = (Vec::new(), Vec::new());
    let mut counts = Vec::new();
    for t in threads {
        let (waits, h) = t.join().map_err(|_| "worker panicked")??;
        counts.push(waits.len());
        all.extend(waits);
        handovers.extend(h);
    }
    handovers.sort();
    let elapsed = start.elapsed();
    let total: u64 = client.get_connection()?.get("bench:c:counter")?;
    let (all_usec, evalsha) = command_time(&mut client.get_connection()?)?;
    if total != all.len() as u64 {
        return Err(format!("lost updates: counter {total}, acquisitions {}", all.len()).into());
    }
    all.sort();
    let pick = |permille: usize| percentile(&all, permille);
    let max_n = counts.iter().copied().max().unwrap_or(0);
    let min_n = counts.iter().copied().min().unwrap_or(0);
    Ok(Contended {
        per_sec: all.len() as f64 / elapsed.as_secs_f64(),
        p50: pick(500),
        p99: pick(990),
        max: all.last().copied().unwrap_or_default(),
        fairness: if min_n == 0 {
            f64::INFINITY
        } else {
            max_n as f64 / min_n as f64
        },
        handover: (percentile(&handovers, 500), percentile(&handovers, 990)),
        server: (all_usec / total.max(1) as f64, evalsha),
    })
}

/// The server's time in commands since its stats were reset, from `INFO
/// commandstats`: in all, and per `EVALSHA` call (0 without any), in µs.
fn command_time(c: &mut redis::Connection) -> Res<(f64, f64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c)?;
    let (mut all, mut evalsha) = (0.0, 0.0);
    for line in info.lines() {
        let Some((name, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |key: &str| {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // CONFIG RESETSTAT and INFO are the bench's own.
        if !name.starts_with("config") && name != "info" {
            all += field("usec");
        }
        if name == "evalsha" {
            evalsha = field("usec_per_call");
        }
    }
    Ok((all, evalsha))
}

/// PING round trips on one connection: p50 and p99 over `n`.
fn round_trip(url: &str, n: usize, idle: Duration) -> Res<(Duration, Duration)> {
    let mut conn = redis::Client::open(url)?.get_connection()?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        if !idle.is_zero() {
            pause(idle);
        }
        let t = Instant::now();
        let _: String = redis::cmd("PING").query(&mut conn)?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok((percentile(&times, 500), percentile(&times, 990)))
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

/// Puts process `pid` (0: this one) on CPU `cpu`.
#[cfg(target_os = "linux")]
fn pin_to(pid: i32, cpu: usize) -> Res<()> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(cpu)?;
    sched_setaffinity(Pid::from_raw(pid), &set)?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn pin_to(_pid: i32, _cpu: usize) -> Res<()> {
    Err("pinned runs need Linux".into())
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
            "   cycle time ratio redmutex/raw: {:.2} (target: 1.20 or less); without the watchdog {:.2}",
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
        let (with, without) = alternating(
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
    let (one, three) = alternating(
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
fn alternating(
    run: Duration,
    mut a: impl FnMut() -> Res<()>,
    mut b: impl FnMut() -> Res<()>,
) -> Res<(f64, f64)> {
    let (mut spent_a, mut spent_b, mut n_a, mut n_b) = (Duration::ZERO, Duration::ZERO, 0u64, 0u64);
    while spent_a < run || spent_b < run {
        for (f, spent, n) in [
            (
                &mut a as &mut dyn FnMut() -> Res<()>,
                &mut spent_a,
                &mut n_a,
            ),
            (&mut b, &mut spent_b, &mut n_b),
        ] {
            let start = Instant::now();
            for _ in 0..20 {
                f()?;
            }
            *spent += start.elapsed();
            *n += 20;
        }
    }
    Ok((
        n_a as f64 / spent_a.as_secs_f64(),
        n_b as f64 / spent_b.as_secs_f64(),
    ))
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
