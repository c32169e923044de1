//! The terminal: the command's group in its foreground, and its stops
//! passed on to the shell.

use libc::SIGTSTP;

/// This process's controlling terminal, when it is stdin: when this
/// process runs in its foreground, the command's group is put in the
/// foreground; either way, the command's stops by the terminal are passed
/// on to the shell (see [`Terminal::suspend`]).
pub struct Terminal {
    /// This process's own group, which gets the terminal back.
    group: i32,
    /// Whether this process was in the terminal's foreground when the
    /// command started (else it was started in the background, `&`).
    pub foreground: bool,
}

impl Terminal {
    /// `Some` when stdin is this process's controlling terminal. Then
    /// ignores SIGTTOU for good, so that this process, in the background
    /// while the command runs, can take the terminal back and write its
    /// messages whatever the terminal's `tostop`.
    pub fn take() -> Option<Terminal> {
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
    pub fn give_back(&self, job: i32) {
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
    pub fn suspend(&self, job: i32, signal: i32) {
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
    pub fn restore(&self) {
        // SAFETY: as in `take`; a failure leaves the terminal as it was.
        unsafe {
            if self.foreground {
                libc::tcsetpgrp(libc::STDIN_FILENO, self.group);
            }
        }
    }
}
