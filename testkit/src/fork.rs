//! Runs a closure in a forked copy of the calling process, for the tests
//! of what a child inherits (the library itself forbids `unsafe`).

use std::panic::{self, AssertUnwindSafe};

use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

/// Forks; the child runs `child` and exits with the code it returns (101
/// when it panics); the parent waits for it and returns that code, or
/// `None` when the child could not be forked or did not exit normally.
///
/// The child is a copy of a multi-threaded process with only the calling
/// thread in it, as a pre-forking server's workers are: `child` must not
/// need a lock another thread held at the fork.
pub fn in_child(child: impl FnOnce() -> i32) -> Option<i32> {
    // SAFETY: the child runs `child` and exits, never returning into the
    // caller's frames; what it may call is the caller's to choose (see
    // above), as with any `fork`.
    #[allow(unsafe_code)]
    let forked = unsafe { fork() };
    match forked.ok()? {
        ForkResult::Child => {
            let code = panic::catch_unwind(AssertUnwindSafe(child)).unwrap_or(101);
            std::process::exit(code)
        }
        ForkResult::Parent { child } => match waitpid(child, None).ok()? {
            WaitStatus::Exited(_, code) => Some(code),
            _ => None,
        },
    }
}
