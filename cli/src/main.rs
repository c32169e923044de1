//! `redmutex`: run a command while holding a Redis lock, for cron jobs on
//! many hosts that must not run twice. See `redmutex --help`.
//!
//! Unix only: the command supervises its job through process groups,
//! POSIX signals and terminal job control.

#[cfg(not(unix))]
compile_error!(
    "the redmutex command runs on Unix only (Linux, macOS, the BSDs): it supervises its job \
     through process groups, POSIX signals and terminal job control. The redmutex library \
     itself builds everywhere."
);

/// Writes one line to stderr, never panicking: a closed or broken
/// stderr must not stop the supervisor before it has stopped the job.
#[cfg(unix)]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

#[cfg(unix)]
mod app;
#[cfg(unix)]
mod holder;
#[cfg(unix)]
mod leader;
#[cfg(unix)]
mod ops;
#[cfg(unix)]
mod run;
#[cfg(unix)]
mod watch;

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    app::main()
}

#[cfg(not(unix))]
fn main() {}
