//! `redmutex run`: take the lock, run the command in its own process group,
//! stop the group when the lease can no longer be promised, release.

use std::io;
use std::os::unix::io::RawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::{
    SIGALRM, SIGHUP, SIGINT, SIGIO, SIGKILL, SIGPROF, SIGQUIT, SIGTERM, SIGTSTP, SIGTTIN, SIGTTOU,
    SIGUSR1, SIGUSR2, SIGVTALRM, SIGXCPU, SIGXFSZ,
};
use redmutex::{Error, Guard, Locker};
use signal_hook::iterator::Signals;

use crate::app::{source, RunArgs, LOST, UNAVAILABLE, USAGE};
use crate::watch::Watcher;

/// Every catchable signal whose default action ends a process, other than
/// the fault signals (ABRT, BUS, FPE, ILL, SEGV, SYS, TRAP: the supervisor
/// itself failed, which its watcher covers as it covers SIGKILL) and the
/// real-time ones. While waiting, one calls the wait off; once the command
/// runs, each is forwarded to its process group. Listed in `--help`.
#[cfg(target_os = "linux")]
pub const FORWARDED: &[i32] = &[
    SIGHUP,
    SIGINT,
    SIGQUIT,
    SIGTERM,
    SIGUSR1,
    SIGUSR2,
    SIGALRM,
    SIGVTALRM,
    SIGPROF,
    SIGXCPU,
    SIGXFSZ,
    SIGIO,
    libc::SIGPWR,
];
/// As on Linux, without SIGPWR.
#[cfg(not(target_os = "linux"))]
pub const FORWARDED: &[i32] = &[
    SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU,
    SIGXFSZ, SIGIO,
];

/// How often the supervisor looks at the child (a loss wakes it at once).
const TICK: Duration = Duration::from_millis(50);

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

/// `redmutex run`: takes the lock, starts the watcher, runs the command,
/// supervises it until its whole group has exited (or stops it), releases.
pub fn run(locker: &Locker, args: &RunArgs) -> ExitCode {
    // From here on the signals in `FORWARDED` are ours: they call off a
    // wait, and are forwarded to the command once it runs.
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, signals) = mpsc::channel();
    let listening = Signals::new(FORWARDED).and_then(|mut incoming| {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for signal in incoming.forever() {
                    stop.store(true, Ordering::SeqCst);
                    if tx.send(signal).is_err() {
                        break;
                    }
                }
            })
    });
    if let Err(e) = listening {
        say!("redmutex: cannot handle signals: {e}");
        return ExitCode::from(UNAVAILABLE);
    }
    let guard = match take(locker, args, &stop, &signals) {
        Ok(guard) => guard,
        Err(code) => return code,
    };
    let taken_at = Instant::now();
    if stop.load(Ordering::SeqCst) {
        // Asked to quit while the lock was being granted.
        drop(guard);
        return signalled(&signals);
    }
    // The watcher first: without it, a SIGKILL of this process would leave
    // the job running past the lease, so no watcher, no job.
    let mut watcher =
        match Watcher::start(kill_grace(args), kill_margin(args.ttl), guard.valid_until()) {
            Ok(w) => w,
            Err(e) => {
                drop(guard);
                say!("redmutex: cannot start the watcher process: {e}");
                return ExitCode::from(UNAVAILABLE);
            }
        };
    adopt_orphans();
    let terminal = Terminal::take();
    let child = match spawn(args, &guard, terminal.as_ref(), watcher.fd()) {
        Ok(child) => child,
        Err(e) => {
            if let Some(t) = &terminal {
                t.restore();
            }
            watcher.done();
            drop(guard);
            say!("redmutex: cannot run {:?}: {e}", args.command[0]);
            let code = if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return ExitCode::from(code);
        }
    };
    let group = i32::try_from(child.id()).unwrap_or(i32::MAX);
    let mut job = Job {
        child,
        group,
        status: None,
        stopped: None,
    };
    // The child told the watcher its group before it ran the command (see
    // `spawn`); kept here for a replacement watcher.
    watcher.told_group(group);
    let told = watcher.deadline(guard.valid_until());
    if let Err(e) = told {
        // The watcher is gone already: no watcher, no job.
        let kill_at = kill_at(&guard, args);
        let emptied = stop_group(&mut job, kill_at, kill_grace(args), &signals, None);
        end_lease(guard, emptied);
        say!("redmutex: the watcher process has exited ({e}): the command was stopped");
        if !emptied {
            say_stuck(args);
        }
        return ExitCode::from(UNAVAILABLE);
    }
    let outcome = supervise(
        &mut job,
        &guard,
        args,
        taken_at,
        &signals,
        &mut watcher,
        terminal.as_ref(),
    );
    if let Some(t) = &terminal {
        t.give_back(group);
    }
    match outcome {
        Ok((status, true)) if watcher.killed_job(status) => {
            // The watcher killed it: this process did not renew (or tell
            // it) in time. Not the command's own ending: a loss.
            watcher.done();
            drop(guard);
            say!(
                "redmutex: the watcher process killed the command: the lease of lock {:?} was \
                 not renewed in time (redmutex was stopped or stuck)",
                args.key
            );
            ExitCode::from(LOST)
        }
        Ok((status, true)) => {
            watcher.done();
            finish(guard, status, args, taken_at)
        }
        Ok((_, false)) => {
            // Stragglers stopped, but not all gone: not released.
            watcher.done();
            end_lease(guard, false);
            say_stuck(args);
            ExitCode::from(LOST)
        }
        Err(why) => {
            // The job first; the message after, so that nothing on the way
            // (a write to a broken stderr) can come before the stop.
            let kill_at = kill_at(&guard, args);
            let emptied = stop_group(
                &mut job,
                kill_at,
                kill_grace(args),
                &signals,
                Some((&mut watcher, &guard)),
            );
            watcher.done();
            if let Some(t) = &terminal {
                t.give_back(group);
            }
            end_lease(guard, emptied);
            say!("redmutex: {why}: the command was stopped");
            if !emptied {
                say_stuck(args);
            }
            ExitCode::from(LOST)
        }
    }
}

/// Ends the hold after a stop: released when the group has exited; else
/// (a process of it outlived its SIGKILL: in uninterruptible sleep, or
/// slow to exit) not released but no longer renewed: the key is left to
/// expire at the lease's local deadline (owner checked, no DEL), so the
/// lock is not given away before the lease would have ended anyway.
fn end_lease(guard: Guard, emptied: bool) {
    if emptied {
        drop(guard);
        return;
    }
    let at = guard.valid_until();
    if at > Instant::now() + Duration::from_millis(2) {
        // A Redis error leaves the key to expire at its own TTL.
        let _ = guard.expire_at(at);
    } else {
        // At or past its deadline the lease is lost (nothing renews it),
        // and an `expire_at` this close would be a release: not dropped
        // either, since dropping releases.
        std::mem::forget(guard);
    }
}

/// The message when the group did not empty after its SIGKILL.
fn say_stuck(args: &RunArgs) {
    say!(
        "redmutex: processes of the command's group were still alive {:?} after SIGKILL: lock \
         {:?} is not released, it expires at the lease's end",
        kill_grace(args),
        args.key
    );
}

/// The first pause after a connection error while waiting; it doubles
/// after each error in a row, up to [`MOST_PAUSE`].
const LEAST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause after a connection error while waiting.
const MOST_PAUSE: Duration = Duration::from_secs(2);

/// Takes the lock: one attempt with `-n`; else waits, until `-w` runs out
/// or for good. While waiting, connection errors (Redis restarting, a
/// failover, a cut link) are logged at `warn` and retried within the wait,
/// after a pause that doubles from 100 ms to 2 s; but a Redis that has
/// never answered (a wrong or dead URL) ends the run at once. `Err` with
/// the exit code when the run ends without the lock, the reason said.
fn take(
    locker: &Locker,
    args: &RunArgs,
    stop: &AtomicBool,
    signals: &mpsc::Receiver<i32>,
) -> Result<Guard, ExitCode> {
    let key = &args.key;
    let start = Instant::now();
    // The first attempt says whether Redis answers at all.
    match locker.try_lock(key) {
        Ok(Some(guard)) => return Ok(guard),
        Ok(None) if args.nonblock => {
            say!("redmutex: lock {key:?} is busy{}", holder_of(locker, key));
            return Err(ExitCode::from(args.conflict_exit_code));
        }
        Ok(None) => {}
        Err(e) => return Err(failed(&e)),
    }
    let deadline = args.wait.and_then(|w| start.checked_add(w));
    let mut last: Option<Error> = None;
    let mut pause = LEAST_PAUSE;
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Err(gave_up(locker, args, start, last.as_ref()));
        }
        let error = match locker.lock_or_stop(key, left, stop) {
            Ok(guard) => match full_lease(&guard, args.ttl) {
                Ok(()) => return Ok(guard),
                // The claim ran out, or was taken, before its take-up: the
                // guard goes (released if still ours), the wait goes on.
                Err(e @ Error::Lost { .. }) => e,
                Err(e) if e.is_connection() => e,
                Err(e) => return Err(failed(&e)),
            },
            Err(Error::Timeout { .. }) => return Err(gave_up(locker, args, start, last.as_ref())),
            Err(Error::Cancelled { .. }) => return Err(signalled(signals)),
            Err(e) if e.is_connection() => e,
            Err(e) => return Err(failed(&e)),
        };
        log::warn!(
            target: "redmutex::run",
            "lock {key:?}: waiting goes on after an error, retried in {pause:?}: {error}{}",
            source(&error)
        );
        last = Some(error);
        let wake = deadline.map_or(pause, |d| {
            pause.min(d.saturating_duration_since(Instant::now()))
        });
        // A signal meanwhile calls the wait off, as during the wait itself.
        if let Ok(signal) = signals.recv_timeout(wake) {
            return Err(ExitCode::from(u8::try_from(128 + signal).unwrap_or(255)));
        }
        pause = (pause * 2).min(MOST_PAUSE);
    }
}

/// A lock handed over by a release comes with the hand-over's short claim
/// (a few seconds), which the guard's watchdog takes up to the TTL right
/// after `lock` returns. The job must not start on the claim (the kill
/// grace and margin are counted from the TTL, and a claim that is not
/// taken up ends within seconds), so a guard with less than two thirds of
/// the TTL left is taken up here first: one renewal to the TTL, confirmed
/// before the job starts.
fn full_lease(guard: &Guard, ttl: Duration) -> Result<(), Error> {
    let full = Instant::now().checked_add(ttl * 2 / 3);
    if full.is_some_and(|full| guard.valid_until() >= full) {
        return Ok(());
    }
    guard.extend(ttl)
}

/// The run ends on error `e` before the lock was taken: 64 for a usage
/// error, else 69.
fn failed(e: &Error) -> ExitCode {
    if let Error::InvalidInput(m) = e {
        say!("redmutex: {m}");
        return ExitCode::from(USAGE);
    }
    say!("redmutex: {e}{}", source(e));
    ExitCode::from(UNAVAILABLE)
}

/// The wait ran out without the lock: the conflict code, saying how long it
/// waited and who holds the lock; 69 when Redis could not be reached at the
/// end, with the last error.
fn gave_up(locker: &Locker, args: &RunArgs, start: Instant, last: Option<&Error>) -> ExitCode {
    let key = &args.key;
    let waited = start.elapsed();
    let waited = Duration::from_millis(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX));
    match locker.holder(key) {
        Err(e) if e.is_connection() => {
            let last = last.unwrap_or(&e);
            say!(
                "redmutex: gave up on lock {key:?} after waiting {waited:?}: Redis cannot be \
                 reached: {last}{}",
                source(last)
            );
            ExitCode::from(UNAVAILABLE)
        }
        holder => {
            let held = match holder {
                Ok(Some(info)) => format!(
                    "; held by {:?}, {} ms left, fencing token {}",
                    info.metadata(),
                    info.ttl().as_millis(),
                    info.fencing_token()
                ),
                _ => String::new(),
            };
            let error = last.map_or(String::new(), |e| {
                format!(" (an error on the way: {e}{})", source(e))
            });
            say!("redmutex: lock {key:?} is busy: waited {waited:?}{held}{error}");
            ExitCode::from(args.conflict_exit_code)
        }
    }
}

/// `; held by ...` for a busy message: who holds `key`, if that can be told.
fn holder_of(locker: &Locker, key: &str) -> String {
    match locker.holder(key) {
        Ok(Some(info)) => format!(
            ": held by {:?}, {} ms left, fencing token {}",
            info.metadata(),
            info.ttl().as_millis(),
            info.fencing_token()
        ),
        _ => String::new(),
    }
}

/// The exit code after a signal called off the wait: 128 + its number.
fn signalled(signals: &mpsc::Receiver<i32>) -> ExitCode {
    let n = signals.try_recv().unwrap_or(SIGTERM);
    ExitCode::from(u8::try_from(128 + n).unwrap_or(255))
}

/// The command, directly (no shell), in a process group of its own, with
/// the key and the fencing token (never the owner token) in its
/// environment. When this process runs in the foreground of a terminal
/// that is its stdin, that group becomes the terminal's foreground group,
/// so the command can read the terminal (and gets its Ctrl-C) as it would
/// without `redmutex`; it gets the terminal back with [`Terminal::restore`].
///
/// Before it runs the command, the child itself writes `G <its pid>` (its
/// process group) to the watcher's pipe `watcher`: that copy of the pipe
/// closes only at exec, so the watcher reads the group before it can see
/// the pipe end, even when this process is killed the instant after the
/// fork. A child that cannot tell the watcher (it is gone) fails to spawn:
/// no watcher, no job.
fn spawn(
    args: &RunArgs,
    guard: &Guard,
    terminal: Option<&Terminal>,
    watcher: Option<RawFd>,
) -> io::Result<Child> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command"))?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("REDMUTEX_KEY", &args.key)
        .env("REDMUTEX_FENCING_TOKEN", guard.fencing_token().to_string())
        .process_group(0);
    let watcher = watcher.ok_or_else(|| io::Error::from(io::ErrorKind::BrokenPipe))?;
    let terminal_foreground = terminal.map(|t| t.foreground);
    // SAFETY: runs in the child between fork and exec, and calls only
    // async-signal-safe functions (getpid, tcsetpgrp, signal, write), with
    // no allocation and no lock.
    unsafe {
        command.pre_exec(move || {
            if let Some(foreground) = terminal_foreground {
                // SIGTTOU is ignored (inherited from `Terminal::take`), so
                // a background group may take the terminal; then back to
                // its default for the command.
                if foreground {
                    libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
                }
                libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            }
            tell_watcher(watcher)
        });
    }
    let child = command.spawn()?;
    if terminal.is_some_and(|t| t.foreground) {
        let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        // SAFETY: plain system calls on integers; failures (the child has
        // already done it, or exited) are harmless.
        unsafe {
            libc::setpgid(pid, pid);
            libc::tcsetpgrp(libc::STDIN_FILENO, pid);
        }
    }
    Ok(child)
}

/// In the child, between fork and exec: writes `G <pid>` (the child leads
/// its own process group by then) to the watcher's pipe `fd`, in one
/// write (atomic on a pipe), with SIGPIPE ignored meanwhile so that a
/// watcher gone makes an error (the spawn fails), not a silent death.
/// Async-signal-safe: no allocation, no lock.
fn tell_watcher(fd: RawFd) -> io::Result<()> {
    let mut line = [0u8; 24];
    line[0] = b'G';
    line[1] = b' ';
    // SAFETY: getpid takes nothing and cannot fail.
    let mut pid = unsafe { libc::getpid() }.unsigned_abs();
    let mut digits = [0u8; 10];
    let mut n = 0;
    loop {
        digits[n] = b'0' + (pid % 10) as u8;
        n += 1;
        pid /= 10;
        if pid == 0 || n == digits.len() {
            break;
        }
    }
    let mut len = 2;
    for d in digits[..n].iter().rev() {
        line[len] = *d;
        len += 1;
    }
    line[len] = b'\n';
    len += 1;
    // SAFETY: signal and write with a pointer into a local buffer of at
    // least `len` bytes.
    unsafe {
        let before = libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let result = loop {
            let w = libc::write(fd, line.as_ptr().cast(), len);
            if w >= 0 {
                break Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                break Err(e);
            }
        };
        libc::signal(libc::SIGPIPE, before);
        result
    }
}

/// This process's controlling terminal, when it is stdin: when this
/// process runs in its foreground, the command's group is put in the
/// foreground; either way, the command's stops by the terminal are passed
/// on to the shell (see [`Terminal::suspend`]).
pub struct Terminal {
    /// This process's own group, which gets the terminal back.
    group: i32,
    /// Whether this process was in the terminal's foreground when the
    /// command started (else it was started in the background, `&`).
    foreground: bool,
}

impl Terminal {
    /// `Some` when stdin is this process's controlling terminal. Then
    /// ignores SIGTTOU for good, so that this process, in the background
    /// while the command runs, can take the terminal back and write its
    /// messages whatever the terminal's `tostop`.
    fn take() -> Option<Terminal> {
        // SAFETY: plain system calls on integers and a signal disposition.
        unsafe {
            if libc::isatty(libc::STDIN_FILENO) != 1
                || libc::tcgetsid(libc::STDIN_FILENO) != libc::getsid(0)
            {
                return None;
            }
            let group = libc::getpgrp();
            let foreground = libc::tcgetpgrp(libc::STDIN_FILENO) == group;
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            Some(Terminal { group, foreground })
        }
    }

    /// Takes the terminal back from the command's group `job`, unless it has
    /// already gone elsewhere (this process was resumed in the background
    /// by `bg`, and the shell has it): SIGTTOU ignored, taking it then would
    /// steal it from the shell.
    fn give_back(&self, job: i32) {
        // SAFETY: as in `take`.
        unsafe {
            if libc::tcgetpgrp(libc::STDIN_FILENO) == job {
                libc::tcsetpgrp(libc::STDIN_FILENO, self.group);
            }
        }
    }

    /// The command's group `job` was stopped by `signal` from the terminal
    /// (Ctrl-Z, or it read or wrote the terminal from the background): the
    /// terminal goes back to this process's group, which stops as a whole
    /// with SIGTSTP, so that the shell sees its job stopped and gets the
    /// terminal; but a command that only touched the terminal while this
    /// process has it (`fg` came first) is given it without a stop. Once
    /// resumed (`fg` or `bg`), the command's group is resumed too, given
    /// the terminal again only when this process is in the foreground.
    /// Where the stop cannot reach a shell (this group is orphaned: no job
    /// control), the kernel discards it and the command is resumed at
    /// once, as the kernel ignores Ctrl-Z for an orphaned group. While this
    /// process is stopped, nothing renews the lease: the watcher kills the
    /// command's group a kill margin before it runs out.
    fn suspend(&self, job: i32, signal: i32) {
        // SAFETY: plain system calls on integers. A stop signal sent to
        // our own group stops this thread before kill(2) returns, or is
        // discarded (orphaned group).
        unsafe {
            self.give_back(job);
            let ours = libc::tcgetpgrp(libc::STDIN_FILENO) == self.group;
            if signal == SIGTSTP || !ours {
                libc::kill(-self.group, libc::SIGTSTP);
            }
            if libc::tcgetpgrp(libc::STDIN_FILENO) == self.group {
                libc::tcsetpgrp(libc::STDIN_FILENO, job);
            }
            libc::kill(-job, libc::SIGCONT);
        }
    }

    /// Gives the terminal back to this process's group, when it had it.
    fn restore(&self) {
        // SAFETY: as in `take`; a failure leaves the terminal as it was.
        unsafe {
            if self.foreground {
                libc::tcsetpgrp(libc::STDIN_FILENO, self.group);
            }
        }
    }
}

/// The command: its first process (the leader of its process group) and
/// that group.
struct Job {
    child: Child,
    group: i32,
    /// How the leader ended, once it has and was reaped.
    status: Option<ExitStatus>,
    /// The signal that stopped the leader, when it was seen stopped and
    /// that was not yet dealt with.
    stopped: Option<i32>,
}

impl Job {
    /// Reaps every process of the group that has exited and is ours to
    /// reap (the leader, and on Linux the orphans this process adopted as
    /// a subreaper), keeping the leader's status.
    fn reap(&mut self, block_for_leader: bool) {
        let leader = i32::try_from(self.child.id()).unwrap_or(i32::MAX);
        loop {
            let mut raw = 0;
            let blocking = block_for_leader && self.status.is_none();
            let (pid, flags) = if blocking {
                (leader, 0)
            } else {
                (-self.group, libc::WNOHANG | libc::WUNTRACED)
            };
            // SAFETY: waitpid with a pointer to a local integer.
            let reaped = unsafe { libc::waitpid(pid, &mut raw, flags) };
            if reaped > 0 && libc::WIFSTOPPED(raw) {
                // Stopped, not ended (WUNTRACED): only the leader's stop
                // matters, to pass a Ctrl-Z on (see `Terminal::suspend`).
                if reaped == leader {
                    self.stopped = Some(libc::WSTOPSIG(raw));
                }
            } else if reaped == leader {
                self.status = Some(ExitStatus::from_raw(raw));
            } else if reaped <= 0 {
                let err = io::Error::last_os_error().raw_os_error();
                if reaped < 0 && err == Some(libc::EINTR) {
                    continue;
                }
                if reaped < 0 && err == Some(libc::ECHILD) && self.status.is_none() {
                    // No child of ours left in the group, the leader
                    // included (cannot happen: only we reap it): count it
                    // ended; the group check still holds the lock for the
                    // rest.
                    self.status = Some(ExitStatus::from_raw(1 << 8));
                }
                return;
            }
        }
    }

    /// Reaps what it can; true once the leader has ended.
    fn leader_done(&mut self) -> bool {
        self.reap(false);
        self.status.is_some()
    }

    /// Whether every process of the group has exited: the leader reaped,
    /// and none of the group left (a zombie not yet reaped by its parent
    /// still counts).
    fn all_done(&mut self) -> bool {
        self.leader_done() && group_is_empty(self.group)
    }
}

/// On Linux, makes this process the child subreaper of its descendants:
/// the orphans of the job (its background processes, once their parent
/// exits) are adopted by it and reaped by [`Job::reap`] the moment they
/// exit, instead of lingering as zombies in the job's group (and so
/// holding the lock) until a slow or absent init reaps them, as in a
/// container whose PID 1 does not. Elsewhere init reaps them.
fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments; failure leaves orphans to init.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// When the SIGKILL of a stop that starts now must land at the
/// latest. A grace after the SIGTERM, and never later than a kill margin
/// before the lease's local deadline while the lease still stands (once
/// it is lost, the grace alone: it cannot be made up for).
fn kill_at(guard: &Guard, args: &RunArgs) -> Instant {
    let now = Instant::now();
    let by_grace = now + kill_grace(args);
    if guard.is_lost() {
        return by_grace;
    }
    let before = guard
        .valid_until()
        .checked_sub(kill_margin(args.ttl))
        .unwrap_or(now);
    by_grace.min(before).max(now)
}

/// Waits for the command to end, forwarding signals to its group, and
/// returns the leader's status once every process of the group has exited
/// (with `--kill-stragglers`, once those left behind the leader are
/// stopped), with whether the group is empty (false: a straggler outlived
/// its SIGKILL). `Err` with the reason when the group must be stopped first:
/// the lease is lost, or could run out before a stop that starts now would
/// end (a kill grace plus the kill margin away), or the max hold is
/// reached.
fn supervise(
    job: &mut Job,
    guard: &Guard,
    args: &RunArgs,
    taken_at: Instant,
    signals: &mpsc::Receiver<i32>,
    watcher: &mut Watcher,
    terminal: Option<&Terminal>,
) -> Result<(ExitStatus, bool), String> {
    let max_until = args.max_hold.and_then(|m| taken_at.checked_add(m));
    let margin = kill_margin(args.ttl);
    loop {
        // A watcher killed on its own is replaced; with none, a SIGKILL of
        // this process would leave the job running past the lease.
        if let Err(e) = watcher.keep(guard.valid_until()) {
            return Err(format!(
                "the watcher process of lock {:?} has exited and cannot be replaced ({e})",
                args.key
            ));
        }
        if job.all_done() {
            if let Some(status) = job.status {
                return Ok((status, true));
            }
        }
        if args.kill_stragglers {
            if let Some(status) = job.status {
                let kill_at = kill_at(guard, args);
                let emptied = stop_group(
                    job,
                    kill_at,
                    kill_grace(args),
                    signals,
                    Some((&mut *watcher, guard)),
                );
                return Ok((status, emptied));
            }
        }
        // Stopped from the terminal: left so, it would keep the terminal
        // and the lock for good; a stop by SIGSTOP (someone's choice) is
        // left alone.
        if let (Some(t), Some(signal @ (SIGTSTP | SIGTTIN | SIGTTOU))) =
            (terminal, job.stopped.take())
        {
            t.suspend(job.group, signal);
        }
        while let Ok(signal) = signals.try_recv() {
            signal_group(job.group, signal);
        }
        let now = Instant::now();
        if let Some(why) = guard.lost_reason() {
            return Err(format!("the lease of lock {:?} is lost ({why})", args.key));
        }
        if guard.valid_until() <= now + kill_grace(args) + margin {
            return Err(format!(
                "the lease of lock {:?} could not be renewed and ends within the kill grace",
                args.key
            ));
        }
        if max_until.is_some_and(|t| now >= t) {
            return Err(format!("the max hold of lock {:?} is reached", args.key));
        }
        guard.wait_lost(TICK);
    }
}

/// SIGTERM to the group, then SIGKILL at `kill_at` to whatever is left of
/// it; then waits up to `after_kill` for the group to be empty (reaping
/// the leader and the orphans this process adopted). True once every
/// process of the group has exited; false when one outlived its SIGKILL
/// that long (uninterruptible sleep, a slow exit): the lock must then not
/// be released (see [`end_lease`]).
///
/// During the grace the watcher is kept as in [`supervise`] (`watch`: the
/// watcher and the lease it is told about): one that exited is replaced,
/// and when none can be, the SIGKILL goes at once, since a SIGKILL of this
/// process would leave the group running past the lease.
fn stop_group(
    job: &mut Job,
    kill_at: Instant,
    after_kill: Duration,
    signals: &mpsc::Receiver<i32>,
    mut watch: Option<(&mut Watcher, &Guard)>,
) -> bool {
    signal_group(job.group, SIGTERM);
    while Instant::now() < kill_at {
        if job.all_done() {
            return true;
        }
        if let Some((watcher, guard)) = watch.as_mut() {
            if watcher.keep(guard.valid_until()).is_err() {
                break;
            }
        }
        // Signals meanwhile change nothing (the group is being stopped):
        // waiting for one is the pause between two looks.
        let pause = kill_at
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(10));
        let _ = signals.recv_timeout(pause);
    }
    signal_group(job.group, SIGKILL);
    let end = Instant::now() + after_kill;
    loop {
        if job.all_done() {
            return true;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let _ = signals.recv_timeout(left.min(Duration::from_millis(10)));
    }
}

/// Sends `signal` to every process of `group`.
pub fn signal_group(group: i32, signal: i32) {
    // SAFETY: kill(2) with a negative pid signals that process group; it
    // takes no pointers and its failure (the group is gone) is harmless.
    unsafe {
        libc::kill(-group, signal);
    }
}

/// Whether no process is left in `group` (the command reaped, and none of
/// its children left).
pub fn group_is_empty(group: i32) -> bool {
    // SAFETY: as in `signal_group`; signal 0 only checks for existence.
    let r = unsafe { libc::kill(-group, 0) };
    r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The command ended by itself: release (or, with `--min-hold`, let the
/// lock expire then) and pass its exit code through, unless the lease was
/// lost meanwhile.
fn finish(guard: Guard, status: ExitStatus, args: &RunArgs, taken_at: Instant) -> ExitCode {
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c & 0xff).unwrap_or(1),
        (None, Some(n)) => u8::try_from(128 + n).unwrap_or(255),
        (None, None) => 1,
    };
    let until = args.min_hold.and_then(|m| taken_at.checked_add(m));
    let released = match until {
        Some(t) if t > Instant::now() => guard.expire_at(t),
        _ => guard.unlock(),
    };
    match released {
        Ok(()) => ExitCode::from(code),
        Err(Error::Lost { .. }) => {
            say!(
                "redmutex: the lease of lock {:?} was lost while the command ran",
                args.key
            );
            ExitCode::from(LOST)
        }
        Err(e) => {
            // The lock was ours throughout as far as anyone can tell; it
            // expires at its TTL.
            say!(
                "redmutex: releasing lock {:?} failed, it expires by itself: {e}{}",
                args.key,
                source(&e)
            );
            ExitCode::from(code)
        }
    }
}
