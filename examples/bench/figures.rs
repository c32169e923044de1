//! The bench's figures that any revision of the library since 0.1 can be
//! measured by: it uses only the API they share (`Locker::open`,
//! `Locker::builder(pool).watchdog(..).build()`, `redmutex::pool`, `lock`,
//! `unlock`), so `bench compare` (see `compare.rs`) builds this same file
//! against an older revision's crate and against this one, and runs both.
//! `examples/bench.rs` uses its pieces for its own sections 1 and 2.
//!
//! One run of [`child_main`] (the program `bench compare` builds) starts a
//! throw-away `redis-server`, pins it to CPU 0 and itself to CPU 1 when
//! asked (`pinned`), and prints one round of figures as lines
//! `figure <name> <value>` (and `cmd <command> <calls> <µs>` per
//! uncontended lock + unlock, from `INFO commandstats`):
//!
//! - `ping_p50_us`: a `PING` round trip;
//! - A: `A_cycle_us`, `A_raw_cycle_us`, `A_ratio` (uncontended lock +
//!   unlock against the raw loop, alternating chunks of 50);
//! - `cpu_us`, `cpu_raw_us`, `cpu_ratio`: the server's own CPU time (`INFO
//!   cpu`) per uncontended cycle, alternating chunks of 500;
//! - B and C: 4 workers over 2 lockers on one key, 0 ms and 2 ms sections
//!   (`B_acq_s`, `B_raw_acq_s`, `B_ratio`, `B_fairness`, and C's);
//! - `handover_p50_us`, `handover_p99_us`: the holder's release call to the
//!   waiter's return from `lock` (another locker, woken through pub/sub),
//!   one waiter at a time; `handover_over_ping_us`: p50 less a `PING`.
//!
//! `only=<group>` (`A`, `cpu`, `B`, `C`, `handover`; repeatable) measures
//! those groups alone.
#![allow(dead_code)] // each program that includes this file uses a part of it

use std::error::Error;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use redis::{Commands, Script};
use redmutex::Locker;
use redmutex_testkit::ThrowAwayServer;

pub type Res<T> = Result<T, Box<dyn Error>>;

/// One cycle of a loop the figures time.
pub type Cycle<'a> = &'a mut dyn FnMut() -> Res<()>;

/// The baseline's release: the usual compare-and-delete script.
pub const CAD: &str =
    r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// One raw acquisition attempt: SET key token NX PX 30000.
pub fn raw_try(conn: &mut redis::Connection, key: &str, token: &str) -> Res<bool> {
    let ok: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query(conn)?;
    Ok(ok.is_some())
}

pub fn raw_release(conn: &mut redis::Connection, cad: &Script, key: &str, token: &str) -> Res<()> {
    let _: i64 = cad.key(key).arg(token).invoke(conn)?;
    Ok(())
}

/// An uncontended raw cycle on `key` through `pool`: SET NX PX, then the
/// compare-and-delete.
pub fn raw_cycle(pool: &r2d2::Pool<redis::Client>, cad: &Script, key: &str) -> Res<()> {
    let mut c = pool.get_timeout(Duration::from_secs(2))?;
    if !raw_try(&mut c, key, "raw")? {
        return Err("raw lock unexpectedly busy".into());
    }
    raw_release(&mut c, cad, key, "raw")
}

/// Waits `d` without a busy loop (a channel nobody sends on).
pub fn pause(d: Duration) {
    let (_tx, rx) = mpsc::channel::<()>();
    let _ = rx.recv_timeout(d);
}

/// The `permille`th of `sorted` (sorted ascending).
pub fn percentile(sorted: &[Duration], permille: usize) -> Duration {
    let i = sorted.len().saturating_sub(1) * permille / 1000;
    sorted.get(i).copied().unwrap_or_default()
}

/// The time each of `cycles` took, run in turn in chunks of `chunk`, until
/// every one has run for `each`: drift in the machine's load (other
/// processes, CPU frequency) then hits them alike, where whole runs one
/// after the other differed by up to 20% on the same code. With the number
/// of cycles each ran.
pub fn alternating(
    cycles: &mut [Cycle<'_>],
    chunk: u32,
    each: Duration,
) -> Res<(Vec<Duration>, u64)> {
    let mut spent = vec![Duration::ZERO; cycles.len()];
    let mut n = 0u64;
    while spent.iter().any(|s| *s < each) {
        for (cycle, spent) in cycles.iter_mut().zip(&mut spent) {
            let start = Instant::now();
            for _ in 0..chunk {
                cycle()?;
            }
            *spent += start.elapsed();
        }
        n += u64::from(chunk);
    }
    Ok((spent, n))
}

/// The server's CPU time so far (user and system, `INFO cpu`), in µs.
pub fn server_cpu(c: &mut redis::Connection) -> Res<f64> {
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
pub fn process_cpu() -> Option<f64> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let ns: u64 = tasks
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    Some(ns as f64 / 1e3)
}

/// The server's CPU time per cycle of each of `cycles`, in µs: each run
/// `total` times, in turn, in chunks of `chunk`, `INFO cpu` read around
/// each chunk on `admin`.
pub fn server_cpu_per_cycle(
    admin: &mut redis::Connection,
    cycles: &mut [Cycle<'_>],
    chunk: u32,
    total: u32,
) -> Res<Vec<f64>> {
    let mut used = vec![0.0; cycles.len()];
    for _ in 0..total / chunk {
        for (cycle, used) in cycles.iter_mut().zip(&mut used) {
            let before = server_cpu(admin)?;
            for _ in 0..chunk {
                cycle()?;
            }
            *used += server_cpu(admin)? - before;
        }
    }
    let n = f64::from(total / chunk * chunk);
    Ok(used.into_iter().map(|u| u / n).collect())
}

/// `INFO commandstats` parsed: each command's name, calls, µs in all and
/// µs per call.
fn command_stats(c: &mut redis::Connection) -> Res<Vec<(String, f64, f64, f64)>> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c)?;
    Ok(info
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let (calls, usec, per) = (field("calls"), field("usec"), field("usec_per_call"));
            Some((name.to_owned(), calls, usec, per))
        })
        .collect())
}

/// Whether a command of `INFO commandstats` is the bench's own (`CONFIG
/// RESETSTAT`, `INFO`) or a connection's handshake (`CLIENT SETINFO`).
fn the_benchs_own(name: &str) -> bool {
    name.starts_with("config") || name.starts_with("client") || name == "info"
}

/// Each command's calls and µs per cycle of `cycle`, run `n` times after
/// `CONFIG RESETSTAT` (`INFO commandstats` counts each `redis.call` in a
/// script as a command of its own), sorted by name; the bench's own
/// commands left out.
pub fn commands_per_cycle(
    admin: &mut redis::Connection,
    n: u32,
    mut cycle: impl FnMut() -> Res<()>,
) -> Res<Vec<(String, f64, f64)>> {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(admin)?;
    for _ in 0..n {
        cycle()?;
    }
    let per = f64::from(n);
    let mut out: Vec<_> = command_stats(admin)?
        .into_iter()
        .filter(|(name, ..)| !the_benchs_own(name))
        .map(|(name, calls, usec, _)| (name, calls / per, usec / per))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// What one contended run measured.
pub struct Contended {
    pub per_sec: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub fairness: f64,
    /// Release sent → the next holder's lock returned (a waiter's), p50
    /// and p99.
    pub handover: (Duration, Duration),
    /// The server's time in commands (`INFO commandstats`) per acquisition,
    /// and per `EVALSHA` (the scripts, with the calls they make), in µs.
    pub server: (f64, f64),
}

/// How a contended worker takes the lock.
#[derive(Clone)]
pub enum Mode {
    /// SET NX PX, retried every 1 ms; compare-and-delete to release.
    Raw(r2d2::Pool<redis::Client>),
    /// `Locker::lock` / `Guard::unlock`.
    Ours(Locker),
}

/// 4 workers on one key: lock, GET a counter, hold, SET it, unlock. Runs
/// for `run`; fairness is max/min acquisitions per worker.
pub fn contended(url: &str, run: Duration, hold: Duration, modes: &[Mode]) -> Res<Contended> {
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
    let (mut all, mut evalsha) = (0.0, 0.0);
    for (name, _, usec, per) in command_stats(c)? {
        if !the_benchs_own(&name) {
            all += usec;
        }
        if name == "evalsha" {
            evalsha = per;
        }
    }
    Ok((all, evalsha))
}

/// PING round trips on one connection: p50 and p99 over `n`, each after
/// `idle`.
pub fn round_trip(url: &str, n: usize, idle: Duration) -> Res<(Duration, Duration)> {
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

/// The hand-over alone, `rounds` times: a holder (one locker) holds the
/// lock while a waiter (another, woken through pub/sub as another process
/// would be) queues behind it; from the holder's release call to the
/// waiter's return from `lock`, p50 and p99. The waiter is seen queued
/// (`ZCARD` of its queue) before each release.
pub fn handover(url: &str, rounds: usize) -> Res<(Duration, Duration)> {
    const KEY: &str = "bench:h:lock";
    const QUEUE: &str = "__redmutex__:queue:bench:h:lock";
    let (holder, waiter) = (Locker::open(url)?, Locker::open(url)?);
    let mut admin = redis::Client::open(url)?.get_connection()?;
    let (go, asked) = mpsc::channel::<()>();
    let (got, returned) = mpsc::channel::<Result<Instant, String>>();
    let w = std::thread::Builder::new()
        .name("handover-waiter".into())
        .spawn(move || {
            for () in asked {
                let taken = waiter.lock(KEY).map_err(|e| e.to_string());
                let at = Instant::now();
                let guard = match taken {
                    Ok(guard) => guard,
                    Err(e) => {
                        let _ = got.send(Err(e));
                        return;
                    }
                };
                if got.send(Ok(at)).is_err() {
                    return;
                }
                if let Err(e) = guard.unlock() {
                    let _ = got.send(Err(e.to_string()));
                    return;
                }
            }
        })?;
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let held = holder.lock(KEY)?;
        go.send(())?;
        while admin.zcard::<_, u64>(QUEUE)? == 0 {}
        let released = Instant::now();
        held.unlock()?;
        let at = returned.recv()??;
        times.push(at.saturating_duration_since(released));
    }
    drop(go);
    w.join().map_err(|_| "the waiter panicked")?;
    times.sort();
    Ok((percentile(&times, 500), percentile(&times, 990)))
}

/// Puts process `pid` (0: this one, every thread it starts from now on)
/// on CPU `cpu`.
#[cfg(target_os = "linux")]
pub fn pin_to(pid: i32, cpu: usize) -> Res<()> {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    set.set(cpu)?;
    sched_setaffinity(Pid::from_raw(pid), &set)?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub fn pin_to(_pid: i32, _cpu: usize) -> Res<()> {
    Err("pinned runs need Linux".into())
}

/// Prints one figure for `bench compare`.
fn figure(name: &str, value: f64) {
    println!("figure {name} {value:.3}");
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One round of figures (see the module's docs), on a server of its own:
/// `pinned` puts it on CPU 0 and this process on CPU 1; `quick` runs
/// shorter.
pub fn child_main() -> Res<()> {
    let pinned = std::env::args().any(|a| a == "pinned");
    let quick = std::env::args().any(|a| a == "quick");
    // `only=<group>`: those groups alone (A, cpu, B, C, handover).
    let only: Vec<String> = std::env::args()
        .filter_map(|a| a.strip_prefix("only=").map(str::to_owned))
        .collect();
    let wanted = |group: &str| only.is_empty() || only.iter().any(|o| o == group);
    let run = if quick {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(1)
    };
    let server = ThrowAwayServer::start(&[], Duration::from_secs(20))?;
    if pinned {
        pin_to(i32::try_from(server.pid())?, 0)?;
        pin_to(0, 1)?;
    }
    let url = server.url();
    let (ping, _) = round_trip(&url, 2000, Duration::ZERO)?;
    figure("ping_p50_us", us(ping));

    let pool = redmutex::pool(&url)?;
    let cad = Script::new(CAD);
    let locker = Locker::open(&url)?;
    let mut raw = || raw_cycle(&pool, &cad, "bench:u:raw");
    let mut ours = || -> Res<()> { Ok(locker.lock("bench:u:ours")?.unlock()?) };
    for _ in 0..100 {
        raw()?;
        ours()?;
    }
    if wanted("A") {
        let (spent, n) = alternating(&mut [&mut raw as Cycle<'_>, &mut ours], 50, run * 3)?;
        let cycle = |i: usize| spent.get(i).map_or(f64::NAN, |d| us(*d) / n as f64);
        figure("A_raw_cycle_us", cycle(0));
        figure("A_cycle_us", cycle(1));
        figure("A_ratio", cycle(1) / cycle(0));
    }
    if wanted("cpu") {
        let mut admin = redis::Client::open(url.as_str())?.get_connection()?;
        let mut cycles = [&mut raw as Cycle<'_>, &mut ours];
        let cpu = server_cpu_per_cycle(&mut admin, &mut cycles, 500, 3000)?;
        let cpu_of = |i: usize| cpu.get(i).copied().unwrap_or(f64::NAN);
        let (cpu_raw, cpu_ours) = (cpu_of(0), cpu_of(1));
        figure("cpu_raw_us", cpu_raw);
        figure("cpu_us", cpu_ours);
        figure("cpu_ratio", cpu_ours / cpu_raw);
        for (name, calls, usec) in commands_per_cycle(&mut admin, 2000, &mut ours)? {
            println!("cmd {name} {calls:.2} {usec:.2}");
        }
    }

    let raw_modes = [
        Mode::Raw(redmutex::pool(&url)?),
        Mode::Raw(redmutex::pool(&url)?),
    ];
    let our_modes = [
        Mode::Ours(Locker::open(&url)?),
        Mode::Ours(Locker::open(&url)?),
    ];
    for (name, hold) in [("B", Duration::ZERO), ("C", Duration::from_millis(2))] {
        if !wanted(name) {
            continue;
        }
        let raw = contended(&url, run * 2, hold, &raw_modes)?;
        let ours = contended(&url, run * 2, hold, &our_modes)?;
        figure(&format!("{name}_raw_acq_s"), raw.per_sec);
        figure(&format!("{name}_acq_s"), ours.per_sec);
        figure(&format!("{name}_ratio"), ours.per_sec / raw.per_sec);
        figure(&format!("{name}_fairness"), ours.fairness);
        figure(&format!("{name}_handover_p50_us"), us(ours.handover.0));
    }

    if wanted("handover") {
        let rounds = if quick { 500 } else { 2000 };
        let (p50, p99) = handover(&url, rounds)?;
        figure("handover_p50_us", us(p50));
        figure("handover_p99_us", us(p99));
        figure("handover_over_ping_us", us(p50) - us(ping));
    }
    Ok(())
}
