//! The watcher: a second process that stops the job when its supervisor
//! (`redmutex run`) can no longer, even killed by SIGKILL.
//!
//! `run` starts it (as `redmutex __watch <grace> <margin> <deadline>`, in a
//! process group of its own, so that neither the terminal nor a signal to
//! the supervisor's group reaches it) before the command, and talks to it over its stdin, one line
//! a message:
//!
//! - `G <pgid>`: the command's process group, written by the command's
//!   child itself before exec (so it comes before the pipe can end), and
//!   by the supervisor to a replacement watcher;
//! - `D <ms>`: the lease's local deadline is `<ms>` from now;
//! - `X`: the group has exited (or was stopped): nothing left to do.
//!
//! A watcher that exits on its own (killed alone) is replaced by the
//! supervisor within one of its looks (50 ms); when none can be started,
//! the supervisor stops the command.
//!
//! When its stdin ends without `X` (the supervisor died, whatever killed
//! it), it sends the group SIGTERM, then SIGKILL at the earlier of the kill
//! grace and the kill margin before the last deadline it was told. When the
//! deadline less the margin passes with the supervisor alive (stopped, or
//! stuck), it sends the group SIGKILL and exits 3, which the supervisor
//! reports as a loss (exit 70) and replaces.

use std::io::{self, BufRead, Write};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::group::{group_is_empty, signal_group};

/// How often the watcher looks whether the group is gone, between
/// messages.
const TICK: Duration = Duration::from_millis(20);

/// The supervisor's end: the watcher process and the pipe to it.
pub struct Watcher {
    child: Child,
    pipe: Option<ChildStdin>,
    /// The last deadline sent, to send only changes.
    sent: Option<Instant>,
    /// The kill grace and margin it was started with, for a replacement.
    grace: Duration,
    margin: Duration,
    /// The command's group, once told, for a replacement.
    group: Option<i32>,
    /// Whether a watcher of this run has exited with [`KILLED`].
    killed_job: bool,
}

/// The watcher's exit code after it killed the command's group at the
/// deadline with the supervisor alive (stopped, or stuck).
const KILLED: i32 = 3;

impl Watcher {
    /// Starts the watcher (this program, `__watch`) with the kill grace and
    /// margin of this run, and the lease's local deadline `until` (so that
    /// it has one before the command can run, even when this process is
    /// stuck before it sends any).
    pub fn start(grace: Duration, margin: Duration, until: Instant) -> io::Result<Watcher> {
        let mut child = Command::new(own_image()?)
            .arg0("redmutex")
            .arg("__watch")
            .arg(millis(grace).to_string())
            .arg(millis(margin).to_string())
            .arg(millis(until.saturating_duration_since(Instant::now())).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take();
        Ok(Watcher {
            child,
            pipe,
            sent: Some(until),
            grace,
            margin,
            group: None,
            killed_job: false,
        })
    }

    /// The write end of the pipe to the watcher, for the command's child to
    /// tell it its group before exec (see `run::job::spawn`).
    pub fn fd(&self) -> Option<RawFd> {
        self.pipe.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Records the command's process group, which the command's child has
    /// told the watcher itself, for a replacement watcher.
    pub fn told_group(&mut self, group: i32) {
        self.group = Some(group);
    }

    /// Tells the watcher the command's process group.
    pub fn group(&mut self, group: i32) -> io::Result<()> {
        self.group = Some(group);
        self.send(&format!("G {group}"))
    }

    /// Tells the watcher the lease's local deadline `until` (when it
    /// changed), after replacing the watcher with a new one told the same
    /// group when it has exited (killed on its own: `kill -9`, the OOM
    /// killer). `Err` when no watcher runs: the command must be stopped.
    pub fn keep(&mut self, until: Instant) -> io::Result<()> {
        let exited = self.exited();
        if !exited && self.deadline(until).is_ok() {
            return Ok(());
        }
        let mut new = Watcher::start(self.grace, self.margin, until)?;
        new.killed_job = self.killed_job;
        if let Some(g) = self.group {
            new.group(g)?;
        }
        new.deadline(until)?;
        let mut old = std::mem::replace(self, new);
        // The old one has exited, or cannot be told anything: killed
        // first (its pipe closing would have it stop the group), then
        // reaped so that it leaves no zombie.
        let _ = old.child.kill();
        drop(old.pipe.take());
        let _ = old.child.wait();
        Ok(())
    }

    /// Whether the watcher has exited (noting whether it killed the job).
    fn exited(&mut self) -> bool {
        match self.child.try_wait() {
            Ok(None) => false,
            Ok(Some(status)) => {
                self.killed_job |= status.code() == Some(KILLED);
                true
            }
            Err(_) => true,
        }
    }

    /// Whether a watcher of this run killed the command, which ended with
    /// `status`. A watcher exits right after its SIGKILL, so for a command
    /// killed by SIGKILL this waits up to 200 ms for it to say so.
    pub fn killed_job(&mut self, status: ExitStatus) -> bool {
        if self.killed_job {
            return true;
        }
        if status.signal() != Some(libc::SIGKILL) {
            return false;
        }
        let end = Instant::now() + Duration::from_millis(200);
        // Nothing else to wait for: a channel that never receives makes
        // the pause between two looks.
        let (_keep, pause) = mpsc::channel::<()>();
        while !self.exited() && Instant::now() < end {
            let _ = pause.recv_timeout(Duration::from_millis(5));
        }
        self.killed_job
    }

    /// Whether a watcher of this run has killed the command (a kill
    /// margin before the lease's deadline, this process alive but stopped
    /// or stuck).
    pub fn has_killed_job(&mut self) -> bool {
        self.exited();
        self.killed_job
    }

    /// Tells the watcher the lease's local deadline, when it changed.
    pub fn deadline(&mut self, until: Instant) -> io::Result<()> {
        if self.sent == Some(until) {
            return Ok(());
        }
        self.sent = Some(until);
        let left = until.saturating_duration_since(Instant::now());
        self.send(&format!("D {}", millis(left)))
    }

    /// The group has exited: the watcher ends, and is waited for.
    pub fn done(mut self) {
        let _ = self.send("X");
        drop(self.pipe.take());
        let _ = self.child.wait();
    }

    fn send(&mut self, line: &str) -> io::Result<()> {
        match &mut self.pipe {
            // One write: a line is never split between two writes.
            Some(pipe) => pipe.write_all(format!("{line}\n").as_bytes()),
            None => Err(io::Error::from(io::ErrorKind::BrokenPipe)),
        }
    }
}

/// The program to start the watcher from: on Linux the running image
/// itself (`/proc/self/exe`), which still works, and is still the same
/// version, when the file it was started from was replaced or removed
/// meanwhile (an upgrade during a long wait); elsewhere, or without
/// `/proc`, the path it was started from.
fn own_image() -> io::Result<PathBuf> {
    #[cfg(target_os = "linux")]
    {
        let image = std::path::Path::new("/proc/self/exe");
        if image.exists() {
            return Ok(image.to_path_buf());
        }
    }
    std::env::current_exe()
}

/// A duration in whole milliseconds, rounded down, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `redmutex __watch <grace ms> <margin ms> <deadline ms>`: the watcher's
/// side. The deadline counts from this process's start, a little after the
/// supervisor measured it: the kill margin covers that.
pub fn watch(grace_ms: u64, margin_ms: u64, deadline_ms: u64) -> ExitCode {
    let (grace, margin) = (
        Duration::from_millis(grace_ms),
        Duration::from_millis(margin_ms),
    );
    let started = Instant::now();
    let (tx, rx) = mpsc::channel::<String>();
    let reading = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            for line in io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    if reading.is_err() {
        return ExitCode::from(1);
    }
    let mut group: Option<i32> = None;
    // The moment the group must be dead by: the deadline less the margin.
    let mut kill_by: Option<Instant> = started
        .checked_add(Duration::from_millis(deadline_ms))
        .map(|until| until.checked_sub(margin).unwrap_or(started));
    loop {
        let now = Instant::now();
        let wait = kill_by.map_or(TICK, |k| k.saturating_duration_since(now).min(TICK));
        match rx.recv_timeout(wait) {
            Ok(line) => {
                let mut words = line.split_whitespace();
                match (
                    words.next(),
                    words.next().and_then(|w| w.parse::<u64>().ok()),
                ) {
                    (Some("G"), Some(g)) => group = i32::try_from(g).ok(),
                    (Some("D"), Some(ms)) => {
                        let until = Instant::now() + Duration::from_millis(ms);
                        kill_by = Some(until.checked_sub(margin).unwrap_or_else(Instant::now));
                    }
                    (Some("X"), _) => return ExitCode::SUCCESS,
                    _ => {}
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if let (Some(g), Some(k)) = (group, kill_by) {
                    if Instant::now() >= k {
                        // The supervisor is alive but has not stopped the
                        // group in time (stopped, or stuck): it must not
                        // outlive the lease.
                        signal_group(g, libc::SIGKILL);
                        // Said by the exit code; a supervisor that goes on
                        // replaces this watcher.
                        return ExitCode::from(KILLED as u8);
                    }
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                // The supervisor is gone without saying the group ended.
                if let Some(g) = group {
                    stop(g, grace, kill_by);
                }
                return ExitCode::SUCCESS;
            }
        }
    }
}

/// SIGTERM to `group`, then SIGKILL at the earlier of `grace` from now and
/// `kill_by`, unless it has exited before.
fn stop(group: i32, grace: Duration, kill_by: Option<Instant>) {
    signal_group(group, libc::SIGTERM);
    // Nothing else to wait for: a channel that never receives makes the
    // pause between two looks.
    let (_keep, pause) = mpsc::channel::<()>();
    let now = Instant::now();
    let at = kill_by.map_or(now + grace, |k| k.min(now + grace));
    while Instant::now() < at {
        if group_is_empty(group) {
            return;
        }
        let _ = pause.recv_timeout(at.saturating_duration_since(Instant::now()).min(TICK));
    }
    signal_group(group, libc::SIGKILL);
}
