//! Supervising the command: its signals forwarded, the lease watched, and
//! its group stopped (SIGTERM, then SIGKILL) when the lease can no longer
//! be promised.

use std::process::ExitStatus;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use libc::{SIGKILL, SIGTERM, SIGTSTP, SIGTTIN, SIGTTOU};
use redmutex::Guard;

use super::job::Job;
use super::terminal::Terminal;
use crate::args::{kill_grace, kill_margin, RunArgs};
use crate::group::signal_group;
use crate::watch::Watcher;

/// How often the supervisor looks at the child (a loss wakes it at once).
const TICK: Duration = Duration::from_millis(50);

/// When the SIGKILL of a stop that starts now must land at the
/// latest. A grace after the SIGTERM, and never later than a kill margin
/// before the lease's local deadline while the lease still stands (once
/// it is lost, the grace alone: it cannot be made up for).
pub fn kill_at(guard: &Guard, args: &RunArgs) -> Instant {
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
pub fn supervise(
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
/// be released (see [`end_lease`](super::end_lease)).
///
/// During the grace the watcher is kept as in [`supervise`] (`watch`: the
/// watcher and the lease it is told about): one that exited is replaced,
/// and when none can be, the SIGKILL goes at once, since a SIGKILL of this
/// process would leave the group running past the lease.
pub fn stop_group(
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
