//! The exit codes, and how a failure is said on stderr before exiting
//! with one.

use std::process::ExitCode;

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

/// Prints a usage error and returns its exit code.
pub fn usage(message: &str) -> ExitCode {
    say!("redmutex: {message}");
    ExitCode::from(USAGE)
}

/// The exit code of a failed call to the server `server` (its URL as
/// shown, see `connect::shown`), said on stderr: a usage error for bad
/// input, else Redis unavailable.
pub fn failed(e: &redmutex::Error, server: &str) -> ExitCode {
    match e {
        redmutex::Error::InvalidInput(m) => usage(m),
        e => {
            say!("redmutex: {server}: {}", chain(e));
            ExitCode::from(UNAVAILABLE)
        }
    }
}

/// `e` and each of its causes, joined by `: `, as one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}
