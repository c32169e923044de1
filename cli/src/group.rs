//! A process group, as the supervisor and the watcher both signal it.

use std::io;

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
