//! A process of the job's group that exits after the job's leader must not
//! keep the lock as a zombie. Its own test binary: it makes the test
//! process a child subreaper that never reaps, as a container's PID 1
//! that does not reap orphans (this machine's PID 1 reaps them seconds
//! late).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

#[test]
fn an_orphan_that_exited_does_not_keep_the_lock() {
    // SAFETY: prctl with integer arguments; it only changes who adopts the
    // orphans of this process's descendants.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(r, 0, "PR_SET_CHILD_SUBREAPER");
    let s = setup("zombies");
    // The background process exits at once, after its leader: an orphan,
    // adopted by whoever reaps orphans, then a zombie until reaped.
    let run = s
        .cmd(&["run", "zkey", "--", "sh", "-c", "(sleep 0.1 &) ; exit 0"])
        .spawn()
        .unwrap();
    let status = finish_within(run);
    assert_eq!(status.code(), Some(0), "{status:?}");
}
