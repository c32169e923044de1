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

// The command's layout, one line per home:
//
// main.rs       this map, the modules; `main` calls `app::main`
// app.rs        the entry point: parses the command line, runs its command
// args.rs       the argument model: every command and option, `--help`,
//               what a run's options must satisfy together
// connect.rs    the locker a command works with, from its options
// run/          `redmutex run`, the supervisor (see run/mod.rs for its steps)
// watch.rs      the watcher process, and the supervisor's end of its pipe
// operate.rs    the operator's commands: holder, list, break, audit,
//               leader, observe
// holder.rs, leader.rs, ops.rs   what those print, for people and in JSON
// duration.rs   durations as written on the command line
// exit.rs       the exit codes, and how a failure is said
// group.rs      a process group signalled, or found empty
// verbose.rs    `-v`: the library's log events on stderr
//
// Layers: a file imports its own layer or lower ones, never a higher one,
// and no two files import each other (`.ci/layers.py cli/src --check
// --no-circles`):
//
// 1 leaves      exit, duration, group, verbose, holder, leader, ops
// 2 model       args
// 3 mechanism   watch, connect
// 4 commands    run, operate
// 5 entry       app
// 6 root        main

#[cfg(unix)]
mod app;
#[cfg(unix)]
mod args;
#[cfg(unix)]
mod connect;
#[cfg(unix)]
mod duration;
#[cfg(unix)]
mod exit;
#[cfg(unix)]
mod group;
#[cfg(unix)]
mod holder;
#[cfg(unix)]
mod leader;
#[cfg(unix)]
mod operate;
#[cfg(unix)]
mod ops;
#[cfg(unix)]
mod run;
#[cfg(unix)]
mod verbose;
#[cfg(unix)]
mod watch;

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    app::main()
}

#[cfg(not(unix))]
fn main() {}
