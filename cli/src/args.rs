//! The argument model: every command and option, `--help` and its texts,
//! and what a run's options must satisfy together.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::duration::{duration, show};
use crate::exit::BUSY;

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
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run COMMAND (directly, no shell) in its own process group while
    /// holding the lock KEY; --help tells what is guaranteed (Unix only).
    #[command(after_help = EXIT_CODES, after_long_help = run_long_help())]
    Run(RunArgs),
    /// Print who holds KEY (metadata, time left, fencing token) and how many
    /// wait for it, and exit 0; or print `free` and exit 1 (and say on
    /// stderr under which other prefixes a hold of that name is, found by a
    /// walk of the database when it holds at most 100,000 keys). A lock's
    /// key given with an outer prefix or
    /// none (`holder jobs:nr`) is read under its own prefix (`jobs`).
    Holder(HolderArgs),
    /// List every lock, permit, read/write hold and leader under the prefix
    /// and the prefixes nested in it, or without --prefix under every
    /// prefix (a table: prefix, `-` for none, key, kind, holder, ms left,
    /// fencing token, waiters), walking the keyspace with SCAN; exit 0.
    List(ListArgs),
    /// Break the hold KEY (a lock's key, or a name `list` shows) for an
    /// operator: its holder is told at its next renewal (a `run` stops its
    /// command and exits 70), the next waiter gets it, and the break goes
    /// to the audit trail, all under its own prefix (`break jobs:nr`
    /// breaks lock `nr` of prefix `jobs`). Print what was broken and exit
    /// 0; or print `free: nothing broken`, say on stderr under which other
    /// prefixes a hold of that name is (as `holder` does), and exit 1.
    Break(BreakArgs),
    /// Print the audit trails of the prefix and of the prefixes nested in
    /// it, or without --prefix of every prefix (the prefix in a column, `-`
    /// for none), oldest first: every break, and the grants and releases of
    /// lockers with auditing on; exit 0. When there is none, say on stderr
    /// under which prefixes there are events (found by a walk of the
    /// database when it holds at most 100,000 keys).
    Audit(AuditArgs),
    /// Print who leads the election NAME (its value, term and time left,
    /// then the candidates queued, in their order) and exit 0; or print
    /// `no leader` and exit 1 (and say on stderr under which other
    /// prefixes it has one, as `holder` does).
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

impl Command {
    /// The server options of the command, if it talks to one.
    pub fn server_mut(&mut self) -> Option<&mut Server> {
        match self {
            Command::Run(a) => Some(&mut a.server),
            Command::Holder(a) => Some(&mut a.server),
            Command::List(a) => Some(&mut a.server),
            Command::Break(a) => Some(&mut a.server),
            Command::Audit(a) => Some(&mut a.server),
            Command::Leader(a) | Command::Observe(a) => Some(&mut a.server),
            Command::Watch { .. } => None,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct Server {
    /// The Redis server [default: $REDIS_URL, else redis://127.0.0.1:6379/]
    // The environment's value is never printed: a URL may hold a password.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        hide_default_value = true,
        default_value = "redis://127.0.0.1:6379/"
    )]
    pub url: String,
    /// A prefix for the key in Redis [default: none: the key as given]
    #[arg(long)]
    pub prefix: Option<String>,
    /// Whether `url` came from `$REDIS_URL` (set after parsing).
    #[arg(skip)]
    pub from_env: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub server: Server,
    /// The lease length, renewed while the command runs; at least 300ms
    /// with the default kill grace.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub ttl: Duration,
    /// Give up at once when the lock is busy.
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub nonblock: bool,
    /// Give up when the lock is still busy after this long: 1.5s, 2m,
    /// 1h30m, or a number of seconds as flock -w takes it (10) [default:
    /// wait until it is free].
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
pub struct HolderArgs {
    #[command(flatten)]
    pub server: Server,
    /// One JSON object: {"prefix" (the hold's own, null for none), "key"
    /// (its name there), "holder" (its metadata), "ms_left",
    /// "fencing_token", "waiters"}, "holder", "ms_left" and
    /// "fencing_token" null when free.
    #[arg(long)]
    pub json: bool,
    /// The lock's name.
    pub key: String,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub server: Server,
    /// One JSON array of objects {"prefix" (null for none), "key" (its name
    /// there), "kind", "holder", "ms_left", "fencing_token", "waiters"
    /// (their metadata, in queue order)}.
    #[arg(long)]
    pub json: bool,
    /// Only the holds whose name matches this glob (`*`, `?`): the name
    /// under --prefix (`team:*` for prefix `jobs:team`'s under `jobs`).
    pub pattern: Option<String>,
}

#[derive(Args, Debug)]
pub struct BreakArgs {
    #[command(flatten)]
    pub server: Server,
    /// Why: told to the holder, logged, and kept in the audit trail.
    #[arg(long, required = true)]
    pub reason: String,
    /// The lock's key, or a permit's or read-write lock's name as `list`
    /// shows it.
    pub key: String,
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(flatten)]
    pub server: Server,
    /// Only the events of this last while, such as 10m or 1h [default:
    /// all that is kept].
    #[arg(long, value_parser = duration)]
    pub since: Option<Duration>,
    /// One JSON array of objects {"time", "prefix" (null for none),
    /// "action", "kind", "key", "holder", "fencing_token", "reason"}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LeaderArgs {
    #[command(flatten)]
    pub server: Server,
    /// One JSON object a line: {"election", "leader" (its value), "term",
    /// "ms_left"}, the last three null when nobody leads; for `leader`,
    /// "queued" too: the candidates' values, in their order.
    #[arg(long)]
    pub json: bool,
    /// The election's name.
    pub name: String,
}

/// How long before the lease's local deadline the SIGKILL lands at the
/// latest: a tenth of the TTL, from 50 ms to 1 s. It covers the kernel's
/// delivery and the gap between this host's clock and the server's, beyond
/// the library's own drift allowance.
pub fn kill_margin(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// The shortest `--ttl` a run takes: with the default kill grace (a third
/// of the TTL) and the kill margin's floor of 50 ms, the two fit in half
/// the TTL from here on, so that renewals (every third of the TTL) keep the
/// lease past the point where the job must be stopped.
pub const MIN_TTL: Duration = Duration::from_millis(300);

/// The kill grace: `--kill-grace`, or a third of the TTL, at most 10 s.
pub fn kill_grace(args: &RunArgs) -> Duration {
    args.kill_grace
        .unwrap_or_else(|| (args.ttl / 3).min(Duration::from_secs(10)))
}

impl RunArgs {
    /// Why these options cannot work together, if they cannot: a TTL too
    /// short for the default kill grace and the kill margin, or a kill
    /// grace too long for the TTL.
    pub fn check(&self) -> Result<(), String> {
        let margin = kill_margin(self.ttl);
        if self.kill_grace.is_none() && kill_grace(self).saturating_add(margin) > self.ttl / 2 {
            // The default grace follows the TTL, but the margin's floor
            // does not: below this, the run would start the job and
            // then stop it (or its watcher kill it) with the lease fine.
            return Err(format!(
                "--ttl {} is below the command's minimum of {}: the kill grace (a third of the \
                 TTL) plus the kill margin ({}) must fit in half the TTL",
                show(self.ttl),
                show(MIN_TTL),
                show(margin)
            ));
        }
        if let Some(grace) = self.kill_grace {
            if grace.saturating_add(margin) > self.ttl / 2 {
                return Err(format!(
                    "--kill-grace {} plus the kill margin ({}) must be at most half the TTL ({}), \
                     so that the command is stopped before the lease could run out",
                    show(grace),
                    show(margin),
                    show(self.ttl / 2)
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_ttl_is_where_the_default_grace_and_the_margin_fit() {
        let fits = |ttl: Duration| ttl / 3 + kill_margin(ttl) <= ttl / 2;
        assert!(fits(MIN_TTL));
        assert!(fits(Duration::from_secs(30)));
        assert!(!fits(MIN_TTL - Duration::from_millis(1)));
    }
}
