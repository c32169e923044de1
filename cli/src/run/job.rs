//! The command: started in a process group of its own (its group told to
//! the watcher before it runs), reaped with the orphans it leaves.

use std::io;
use std::os::unix::io::RawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};

use redmutex::Guard;

use super::terminal::Terminal;
use crate::args::RunArgs;
use crate::group::group_is_empty;

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
pub fn spawn(
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

/// The command: its first process (the leader of its process group) and
/// that group.
pub struct Job {
    pub child: Child,
    pub group: i32,
    /// How the leader ended, once it has and was reaped.
    pub status: Option<ExitStatus>,
    /// The signal that stopped the leader, when it was seen stopped and
    /// that was not yet dealt with.
    pub stopped: Option<i32>,
}

impl Job {
    /// The command started as `child`, the leader of its own group.
    pub fn new(child: Child) -> Job {
        let group = i32::try_from(child.id()).unwrap_or(i32::MAX);
        Job {
            child,
            group,
            status: None,
            stopped: None,
        }
    }

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
    pub fn all_done(&mut self) -> bool {
        self.leader_done() && group_is_empty(self.group)
    }
}

/// On Linux, makes this process the child subreaper of its descendants:
/// the orphans of the job (its background processes, once their parent
/// exits) are adopted by it and reaped by [`Job::reap`] the moment they
/// exit, instead of lingering as zombies in the job's group (and so
/// holding the lock) until a slow or absent init reaps them, as in a
/// container whose PID 1 does not. Elsewhere init reaps them.
pub fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments; failure leaves orphans to init.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}
