//! The command line: its options, `--help`, and the `holder`, `list`,
//! `break` and `audit` commands.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};

use crate::{holder, leader, ops, run, watch};
use redmutex::{r2d2, redis};

/// Exit code when the lock was busy (`-n`, or the wait ran out), as
/// `EX_TEMPFAIL`.
pub const BUSY: u8 = 75;
/// Exit code when the lease was lost (or the max hold reached) and the
/// child was stopped, as `EX_SOFTWARE`.
pub const LOST: u8 = 70;
/// Exit code when Redis could not be reached or answered with an error
/// before the lock was taken, as `EX_UNAVAILABLE`.
pub const UNAVAILABLE: u8 = 69;
/// Exit code of a usage error, as `EX_USAGE`.
pub const USAGE: u8 = 64;

const EXIT_CODES: &str = "\
Exit codes:
  the child's own  when it exits while the lock was held throughout
  128+N            when the child died of signal N
  75               the lock was busy (-n, or the wait ran out; see -E)
  70               the lease was lost (or --max-hold reached) and the child was stopped
                   (or processes of its group outlived their SIGKILL: the lock expires),
                   or the watcher killed it because redmutex did not renew in time
  69               Redis could not be reached, or answered with an error, before the lock was
                   taken (or was unreachable when a wait ran out)
  64               usage error
  126, 127         the command could not be run, or was not found";

/// What `run --help` says about the guarantee, signals, terminals and
/// platforms, before the exit codes.
const RUN_LONG_HELP: &str = "\
The job never runs without the lock, as far as this host can tell:
  - The lock is held (renewed every TTL/3) until every process of the command's process
    group has exited, as flock(1) holds it while any process has the descriptor. With
    --kill-stragglers, the processes left when the first one exits are stopped instead.
    On Linux redmutex adopts the command's orphans (a child subreaper) and reaps them as
    they exit, so a zombie never holds the lock. After a SIGKILL it waits up to the kill
    grace for the group to be empty; when a process outlives that (uninterruptible sleep,
    a slow exit), the lock is not released but left to expire at the lease's end (exit 70).
  - When the lease is lost, or renewals fail until it would end within the kill grace plus
    the kill margin (a tenth of the TTL, from 50ms to 1s), the group gets SIGTERM, then
    SIGKILL at the earlier of the kill grace and the kill margin before the lease's local
    deadline; messages are written after that, and a broken stderr stops nothing.
  - These signals sent to redmutex are forwarded to the command's group (while waiting,
    they call the wait off, exit 128+N): HUP INT QUIT TERM USR1 USR2 ALRM VTALRM PROF XCPU
    XFSZ IO, and PWR on Linux.
  - When redmutex itself dies (SIGKILL, a fault signal such as SEGV or ABRT, a real-time
    signal) or is stopped or stuck, a watcher process started before the command
    (`redmutex __watch`, in a process group of its own) stops the group the same way: it
    learns of the death when its pipe from redmutex closes, and sends SIGKILL no later than
    the kill margin before the last deadline it was told. It gets the lease's deadline when
    it starts, and the command's group from the command's own process before its exec, so
    no moment exists when the command runs and the watcher does not know it. No watcher, no command: a watcher
    killed alone is replaced within 50ms (during a kill grace too: within 10ms, else the
    SIGKILL goes at once), or the command is stopped (exit 70).
Not covered: processes that left the command's process group (setsid, a daemon, a new
process group: use systemd or cgroups for those); the watcher killed along with redmutex
or within 50ms of it (kill -9 of both, the OOM killer choosing both); a process in
uninterruptible sleep dies only when it wakes; a paused VM, clock drift beyond the library's allowance or a Redis
failover that loses the key: pass $REDMUTEX_FENCING_TOKEN to what the job writes.

From a terminal (stdin a terminal, redmutex in its foreground) the command's group is made
the terminal's foreground group: it reads the terminal and gets Ctrl-C and Ctrl-\\ itself,
and the terminal comes back when it ends. Ctrl-Z stops the command and then redmutex, so the
shell gets the terminal back; `fg` or `bg` resumes both (with no job control, as under
script(1), the command is resumed at once). While stopped nothing renews the lease: a stop
longer than the lease ends with the command killed by the watcher and exit 70. Started in
the background (`&`), a command that reads the terminal stops redmutex with it, as a
background job stops, and `fg` gives it the terminal.

While waiting (-w, or no -n), once Redis has answered, connection errors are retried within
the wait (logged with -v); a Redis that never answered ends the run at once with 69.

Unix only (Linux, macOS, the BSDs); tested on Linux.";

/// `run --help`: the guarantee, then the exit codes.
fn run_long_help() -> String {
    format!("{RUN_LONG_HELP}\n\n{EXIT_CODES}")
}

/// Run a command while holding a Redis lock.
#[derive(Parser, Debug)]
#[command(name = "redmutex", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run COMMAND (directly, no shell) in its own process group while
    /// holding the lock KEY; --help tells what is guaranteed (Unix only).
    #[command(after_help = EXIT_CODES, after_long_help = run_long_help())]
    Run(RunArgs),
    /// Print who holds KEY (metadata, time left, fencing token) and how many
    /// wait for it, and exit 0; or print `free` and exit 1.
    Holder(HolderArgs),
    /// List every lock, permit and read/write hold under the prefix (a
    /// table: key, kind, holder, ms left, fencing token, waiters), walking
    /// the keyspace with SCAN; exit 0.
    List(ListArgs),
    /// Break the hold KEY (a lock's key, or a name `list` shows) for an
    /// operator: its holder is told at its next renewal (a `run` stops its
    /// command and exits 70), the next waiter gets it. Print what was
    /// broken and exit 0; or print `free: nothing broken` and exit 1.
    Break(BreakArgs),
    /// Print the prefix's audit trail, oldest first: every break, and the
    /// grants and releases of lockers with auditing on; exit 0.
    Audit(AuditArgs),
    /// Print who leads the election NAME (its value, term and time left,
    /// then the candidates queued, in their order) and exit 0; or print
    /// `no leader` and exit 1.
    Leader(LeaderArgs),
    /// Print who leads the election NAME, then each change as a line (a
    /// new leader, a new value, `no leader`), until killed.
    Observe(LeaderArgs),
    /// The watcher process that `run` starts (not for direct use).
    #[command(name = "__watch", hide = true)]
    Watch {
        /// The kill grace, in milliseconds.
        grace_ms: u64,
        /// The kill margin, in milliseconds.
        margin_ms: u64,
        /// The lease's local deadline, in milliseconds from the start.
        deadline_ms: u64,
    },
}

#[derive(Args, Debug, Clone)]
struct Server {
    /// The Redis server [default: $REDIS_URL, else redis://127.0.0.1:6379/]
    // The environment's value is never printed: a URL may hold a password.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        hide_default_value = true,
        default_value = "redis://127.0.0.1:6379/"
    )]
    url: String,
    /// A prefix for the key in Redis [default: none: the key as given]
    #[arg(long)]
    prefix: Option<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    server: Server,
    /// The lease length, renewed while the command runs; at least 300ms
    /// with the default kill grace.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub ttl: Duration,
    /// Give up at once when the lock is busy.
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub nonblock: bool,
    /// Give up when the lock is still busy after this long [default: wait
    /// until it is free].
    #[arg(short = 'w', long, value_parser = duration)]
    pub wait: Option<Duration>,
    /// After a lost lease (or --max-hold), SIGKILL the command's process
    /// group this long after SIGTERM [default: a third of the TTL, at most
    /// 10s]. With the kill margin (a tenth of the TTL, from 50ms to 1s), at
    /// most half the TTL.
    #[arg(long, value_parser = duration)]
    pub kill_grace: Option<Duration>,
    /// When the command's first process exits while others of its process
    /// group run on, stop those (SIGTERM, then SIGKILL after the grace)
    /// instead of holding the lock until they have exited.
    #[arg(long)]
    pub kill_stragglers: bool,
    /// Do not hold the lock (nor run the command) longer than this: the
    /// lock is not renewed past it, and the command is stopped as on a loss.
    #[arg(long, value_parser = duration)]
    pub max_hold: Option<Duration>,
    /// When the command ends sooner, keep the lock (not renewed, owner
    /// checked) until this long after it was taken; it then expires by
    /// itself.
    #[arg(long, value_parser = duration)]
    pub min_hold: Option<Duration>,
    /// When the lease ends without a release (this run was killed or
    /// paused, or --min-hold let the lock expire), nobody gets the lock
    /// until this long after its end, by the server's clock [default: 0s,
    /// none]. Cover the longest pause the command may take.
    #[arg(long, value_parser = duration)]
    pub lock_delay: Option<Duration>,
    /// The exit code when the lock is busy.
    #[arg(short = 'E', long, default_value_t = BUSY)]
    pub conflict_exit_code: u8,
    /// The library's log events on stderr, one line each. A stderr that is
    /// not read holds up nothing: past 256 lines waiting, lines are dropped
    /// (and the number dropped said).
    #[arg(short, long)]
    pub verbose: bool,
    /// The lock's name.
    pub key: String,
    /// The command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
struct HolderArgs {
    #[command(flatten)]
    server: Server,
    /// One JSON object: {"key", "holder" (its metadata), "ms_left",
    /// "fencing_token", "waiters"}, the first three null when free.
    #[arg(long)]
    json: bool,
    /// The lock's name.
    key: String,
}

#[derive(Args, Debug)]
struct ListArgs {
    #[command(flatten)]
    server: Server,
    /// One JSON array of objects {"key", "kind", "holder", "ms_left",
    /// "fencing_token", "waiters" (their metadata, in queue order)}.
    #[arg(long)]
    json: bool,
    /// Only the holds whose name matches this glob (`*`, `?`).
    pattern: Option<String>,
}

#[derive(Args, Debug)]
struct BreakArgs {
    #[command(flatten)]
    server: Server,
    /// Why: told to the holder, logged, and kept in the audit trail.
    #[arg(long, required = true)]
    reason: String,
    /// The lock's key, or a permit's or read-write lock's name as `list`
    /// shows it.
    key: String,
}

#[derive(Args, Debug)]
struct AuditArgs {
    #[command(flatten)]
    server: Server,
    /// Only the events of this last while, such as 10m or 1h [default:
    /// all that is kept].
    #[arg(long, value_parser = duration)]
    since: Option<Duration>,
    /// One JSON array of objects {"time", "action", "kind", "key",
    /// "holder", "fencing_token", "reason"}.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct LeaderArgs {
    #[command(flatten)]
    server: Server,
    /// One JSON object a line: {"election", "leader" (its value), "term",
    /// "ms_left"}, the last three null when nobody leads; for `leader`,
    /// "queued" too: the candidates' values, in their order.
    #[arg(long)]
    json: bool,
    /// The election's name.
    name: String,
}

/// A duration such as `500ms`, `30s`, `2m` or `1h`.
fn duration(text: &str) -> Result<Duration, String> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 500ms, 30s, 2m or 1h"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is not a duration like 500ms, 30s, 2m or 1h"))
}

/// Prints a usage error and returns its exit code.
fn usage(message: &str) -> ExitCode {
    say!("redmutex: {message}");
    ExitCode::from(USAGE)
}

fn locker(
    server: &Server,
    ttl: Option<Duration>,
    max_hold: Option<Duration>,
    lock_delay: Option<Duration>,
) -> Result<redmutex::Locker, ExitCode> {
    let pool = redmutex::pool(&server.url).map_err(|e| usage(&format!("--url: {e}")))?;
    build(pool, server, ttl, max_hold, lock_delay)
}

fn build(
    pool: r2d2::Pool<redis::Client>,
    server: &Server,
    ttl: Option<Duration>,
    max_hold: Option<Duration>,
    lock_delay: Option<Duration>,
) -> Result<redmutex::Locker, ExitCode> {
    let mut builder = redmutex::Locker::builder(pool);
    if let Some(p) = &server.prefix {
        builder = builder.prefix(p.clone());
    }
    if let Some(ttl) = ttl {
        builder = builder.ttl(ttl);
    }
    if let Some(hold) = max_hold {
        builder = builder.max_hold(hold);
    }
    if let Some(delay) = lock_delay {
        builder = builder.lock_delay(delay);
    }
    builder.build().map_err(|e| usage(&e.to_string()))
}

fn holder(args: &HolderArgs) -> ExitCode {
    let locker = match locker(&args.server, None, None, None) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let info = match locker.holder(&args.key) {
        Ok(info) => info,
        Err(e) => return failed(&e),
    };
    let waiters = info.as_ref().map_or(0, |i| i.waiters().len());
    let waiters = u64::try_from(waiters).unwrap_or(u64::MAX);
    let line = if args.json {
        holder::json(&args.key, info.as_ref(), waiters)
    } else {
        holder::text(info.as_ref(), waiters)
    };
    print(&line);
    if info.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn list(args: &ListArgs) -> ExitCode {
    let locker = match locker(&args.server, None, None, None) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let holds = match locker.locks_matching(args.pattern.as_deref().unwrap_or("*")) {
        Ok(holds) => holds,
        Err(e) => return failed(&e),
    };
    print(&if args.json {
        ops::json(&holds)
    } else {
        ops::table(&holds)
    });
    ExitCode::SUCCESS
}

fn break_lock(args: &BreakArgs) -> ExitCode {
    let locker = match locker(&args.server, None, None, None) {
        Ok(l) => l,
        Err(code) => return code,
    };
    match locker.break_lock(&args.key, &args.reason) {
        Ok(Some(info)) => {
            print(&ops::broken(&info, &args.reason));
            ExitCode::SUCCESS
        }
        Ok(None) => {
            print("free: nothing broken\n");
            ExitCode::from(1)
        }
        Err(e) => failed(&e),
    }
}

fn audit(args: &AuditArgs) -> ExitCode {
    let locker = match locker(&args.server, None, None, None) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let since = args
        .since
        .and_then(|d| std::time::SystemTime::now().checked_sub(d));
    match locker.audit(since) {
        Ok(events) => {
            print(&if args.json {
                ops::audit_json(&events)
            } else {
                ops::audit_text(&events)
            });
            ExitCode::SUCCESS
        }
        Err(e) => failed(&e),
    }
}

/// Writes `text` to stdout. A closed stdout loses it; the exit code still
/// tells the outcome.
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
}

/// The exit code of a failed call, said on stderr: a usage error for bad
/// input, else Redis unavailable.
fn failed(e: &redmutex::Error) -> ExitCode {
    match e {
        redmutex::Error::InvalidInput(m) => usage(m),
        e => {
            say!("redmutex: {e}{}", source(e));
            ExitCode::from(UNAVAILABLE)
        }
    }
}

/// The election of `args` and its locker, or the exit code of a usage
/// error.
fn election(args: &LeaderArgs) -> Result<(redmutex::Election, redmutex::Locker), ExitCode> {
    let locker = locker(&args.server, None, None, None)?;
    let election = locker.election(&args.name).map_err(|e| match e {
        redmutex::Error::InvalidInput(m) => usage(&m),
        e => usage(&e.to_string()),
    })?;
    Ok((election, locker))
}

/// Writes one state as a line (with `queued`, the candidates queued, on a
/// line of their own or in the JSON object); false when stdout is closed.
fn print_leader(
    args: &LeaderArgs,
    leader: Option<&redmutex::Leader>,
    queued: Option<&[String]>,
) -> bool {
    let line = if args.json {
        leader::json(&args.name, leader, queued)
    } else {
        leader::text(leader) + &leader::queued_text(queued.unwrap_or_default())
    };
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// `redmutex leader`.
fn show_leader(args: &LeaderArgs) -> ExitCode {
    let (election, locker) = match election(args) {
        Ok(e) => e,
        Err(code) => return code,
    };
    // The candidates queued, as a listing names them (a second read: the
    // lead may change in between).
    let key = format!("__redmutex__:election:{}", args.name);
    match election
        .leader()
        .and_then(|l| Ok((l, locker.holder(&key)?)))
    {
        Ok((leader, held)) => {
            let queued = held.map(|h| h.waiters().to_vec()).unwrap_or_default();
            // A closed stdout loses the answer; the exit code still tells it.
            print_leader(args, leader.as_ref(), Some(&queued));
            if leader.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            say!("redmutex: {e}{}", source(&e));
            ExitCode::from(UNAVAILABLE)
        }
    }
}

/// `redmutex observe`: runs until killed, or stdout is closed (exit 0).
fn observe(args: &LeaderArgs) -> ExitCode {
    let election = match election(args) {
        Ok((e, _)) => e,
        Err(code) => return code,
    };
    let observer = match election.observe() {
        Ok(o) => o,
        Err(e) => {
            say!("redmutex: {e}{}", source(&e));
            return ExitCode::from(UNAVAILABLE);
        }
    };
    for change in observer {
        match change {
            Ok(leader) => {
                if !print_leader(args, leader.as_ref(), None) {
                    return ExitCode::SUCCESS;
                }
            }
            // Said, and followed on: the observer goes on from where it was
            // once Redis answers again.
            Err(e) => say!("redmutex: {e}{}", source(&e)),
        }
    }
    ExitCode::SUCCESS
}

/// `: <cause>` for an error with a source, to say what went wrong.
pub fn source(e: &dyn std::error::Error) -> String {
    e.source().map(|s| format!(": {s}")).unwrap_or_default()
}

/// `-v`: the library's log events on stderr, one line each, written by a
/// thread of their own from a bounded queue, so that a log call never
/// blocks: some come from the watchdog thread, and a stderr nobody reads
/// (a full pipe) must not hold up its renewals. A line that finds the queue
/// full is dropped, and the number dropped is said before the next line
/// written.
struct Stderr;

/// How many log lines wait to be written at most.
const LOG_QUEUE: usize = 256;
/// How long the end of a run waits for the queued log lines to be written.
const LOG_FLUSH: Duration = Duration::from_millis(500);

static LOG_LINES: OnceLock<SyncSender<String>> = OnceLock::new();
/// Lines queued and not yet written.
static LOG_PENDING: AtomicUsize = AtomicUsize::new(0);
/// Lines dropped since the last line written.
static LOG_DROPPED: AtomicU64 = AtomicU64::new(0);

impl log::Log for Stderr {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let Some(lines) = LOG_LINES.get() else {
            return;
        };
        let line = format!(
            "redmutex: {} {}: {}\n",
            record.level(),
            record.target(),
            record.args()
        );
        LOG_PENDING.fetch_add(1, Ordering::SeqCst);
        if lines.try_send(line).is_err() {
            LOG_PENDING.fetch_sub(1, Ordering::SeqCst);
            LOG_DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }
    /// Waits (up to 500 ms) for the queued lines to be written.
    fn flush(&self) {
        let end = Instant::now() + LOG_FLUSH;
        // Nothing else to wait for: a channel that never receives makes
        // the pause between two looks.
        let (_keep, pause) = mpsc::channel::<()>();
        while LOG_PENDING.load(Ordering::SeqCst) > 0 && Instant::now() < end {
            let _ = pause.recv_timeout(Duration::from_millis(5));
        }
    }
}

/// Starts the thread that writes the log lines; false when it cannot be
/// started (then `-v` prints nothing).
fn start_logging() -> bool {
    let (lines, queue) = mpsc::sync_channel::<String>(LOG_QUEUE);
    let writer = std::thread::Builder::new()
        .name("log".into())
        .spawn(move || {
            let mut stderr = std::io::stderr();
            for line in queue {
                let dropped = LOG_DROPPED.swap(0, Ordering::SeqCst);
                if dropped > 0 {
                    let _ = writeln!(
                        stderr,
                        "redmutex: {dropped} log lines dropped: stderr was not read in time"
                    );
                }
                let _ = stderr.write_all(line.as_bytes());
                LOG_PENDING.fetch_sub(1, Ordering::SeqCst);
            }
        });
    writer.is_ok() && LOG_LINES.set(lines).is_ok()
}

static STDERR: Stderr = Stderr;

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Holder(args) => holder(&args),
        Command::List(args) => list(&args),
        Command::Break(args) => break_lock(&args),
        Command::Audit(args) => audit(&args),
        Command::Leader(args) => show_leader(&args),
        Command::Observe(args) => observe(&args),
        Command::Watch {
            grace_ms,
            margin_ms,
            deadline_ms,
        } => watch::watch(grace_ms, margin_ms, deadline_ms),
        Command::Run(args) => {
            if args.verbose && start_logging() && log::set_logger(&STDERR).is_ok() {
                log::set_max_level(log::LevelFilter::Debug);
            }
            let margin = run::kill_margin(args.ttl);
            if args.kill_grace.is_none()
                && run::kill_grace(&args).saturating_add(margin) > args.ttl / 2
            {
                // The default grace follows the TTL, but the margin's floor
                // does not: below this, the run would start the job and
                // then stop it (or its watcher kill it) with the lease fine.
                return usage(&format!(
                    "--ttl {:?} is below the command's minimum of {:?}: the kill grace (a third \
                     of the TTL) plus the kill margin ({margin:?}) must fit in half the TTL",
                    args.ttl,
                    run::MIN_TTL
                ));
            }
            if let Some(grace) = args.kill_grace {
                if grace.saturating_add(margin) > args.ttl / 2 {
                    return usage(&format!(
                        "--kill-grace {grace:?} plus the kill margin ({margin:?}) must be at most \
                         half the TTL ({:?}), so that the command is stopped before the lease \
                         could run out",
                        args.ttl
                    ));
                }
            }
            let delay = args.lock_delay;
            let code = match locker(&args.server, Some(args.ttl), args.max_hold, delay) {
                Ok(locker) => run::run(&locker, &args),
                Err(code) => code,
            };
            log::logger().flush();
            code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_ttl_is_where_the_default_grace_and_the_margin_fit() {
        let fits = |ttl: Duration| ttl / 3 + run::kill_margin(ttl) <= ttl / 2;
        assert!(fits(run::MIN_TTL));
        assert!(fits(Duration::from_secs(30)));
        assert!(!fits(run::MIN_TTL - Duration::from_millis(1)));
    }

    #[test]
    fn durations() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "s", "10", "1.5s", "-1s", "10d", "99999999999999999999h"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }
}
