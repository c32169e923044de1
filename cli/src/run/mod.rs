//! `redmutex run`: take the lock, run the command in its own process group,
//! stop the group when the lease can no longer be promised, release.
//!
//! The steps, one file each, in the order a run takes them (each imports
//! only those before it): the signals it takes over (`signals.rs`), the
//! wait for the lock (`take.rs`), the terminal (`terminal.rs`), the
//! command and its group (`job.rs`), the supervision and the stop
//! (`stop.rs`); the watcher process is `crate::watch`.

mod job;
mod signals;
mod stop;
mod take;
mod terminal;

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use redmutex::{Error, Guard, Locker};

use self::job::{adopt_orphans, spawn, Job};
use self::signals::signalled;
use self::stop::{kill_at, stop_group, supervise};
use self::take::take;
use self::terminal::Terminal;
use crate::args::{kill_grace, kill_margin, RunArgs};
use crate::connect::shown;
use crate::duration::show;
use crate::exit::{chain, LOST, UNAVAILABLE};
use crate::watch::Watcher;

/// `redmutex run`: takes the lock, starts the watcher, runs the command,
/// supervises it until its whole group has exited (or stops it), releases.
pub fn run(locker: &Locker, args: &RunArgs) -> ExitCode {
    // From here on the signals in `FORWARDED` are ours: they call off a
    // wait, and are forwarded to the command once it runs.
    let stop = Arc::new(AtomicBool::new(false));
    let signals = match signals::listen(&stop) {
        Ok(signals) => signals,
        Err(e) => {
            say!("redmutex: cannot handle signals: {e}");
            return ExitCode::from(UNAVAILABLE);
        }
    };
    let guard = match take(locker, args, &stop, &signals) {
        Ok(guard) => guard,
        Err(code) => return code,
    };
    let taken_at = Instant::now();
    if stop.load(Ordering::SeqCst) {
        // Asked to quit while the lock was being granted.
        drop(guard);
        return signalled(&signals);
    }
    // The watcher first: without it, a SIGKILL of this process would leave
    // the job running past the lease, so no watcher, no job.
    let mut watcher =
        match Watcher::start(kill_grace(args), kill_margin(args.ttl), guard.valid_until()) {
            Ok(w) => w,
            Err(e) => {
                drop(guard);
                say!("redmutex: cannot start the watcher process: {e}");
                return ExitCode::from(UNAVAILABLE);
            }
        };
    adopt_orphans();
    let terminal = Terminal::take();
    let child = match spawn(args, &guard, terminal.as_ref(), watcher.fd()) {
        Ok(child) => child,
        Err(e) => {
            if let Some(t) = &terminal {
                t.restore();
            }
            watcher.done();
            drop(guard);
            say!("redmutex: cannot run {:?}: {e}", args.command[0]);
            let code = if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return ExitCode::from(code);
        }
    };
    let mut job = Job::new(child);
    let group = job.group;
    // The child told the watcher its group before it ran the command (see
    // `spawn`); kept here for a replacement watcher.
    watcher.told_group(group);
    let told = watcher.deadline(guard.valid_until());
    if let Err(e) = told {
        // The watcher is gone already: no watcher, no job.
        let kill_at = kill_at(&guard, args);
        let emptied = stop_group(&mut job, kill_at, kill_grace(args), &signals, None);
        end_lease(guard, emptied);
        say!("redmutex: the watcher process has exited ({e}): the command was stopped");
        if !emptied {
            say_stuck(args);
        }
        return ExitCode::from(UNAVAILABLE);
    }
    let outcome = supervise(
        &mut job,
        &guard,
        args,
        taken_at,
        &signals,
        &mut watcher,
        terminal.as_ref(),
    );
    if let Some(t) = &terminal {
        t.give_back(group);
    }
    match outcome {
        Ok((status, true)) if watcher.killed_job(status) => {
            // The watcher killed it: this process did not renew (or tell
            // it) in time. Not the command's own ending: a loss.
            watcher.done();
            end_lease(guard, true);
            say!("redmutex: {}", killed_by_watcher(args));
            ExitCode::from(LOST)
        }
        Ok((status, true)) => {
            watcher.done();
            finish(guard, status, args, taken_at)
        }
        Ok((_, false)) => {
            // Stragglers stopped, but not all gone: not released.
            watcher.done();
            end_lease(guard, false);
            say_stuck(args);
            ExitCode::from(LOST)
        }
        Err(why) => {
            // The job first; the message after, so that nothing on the way
            // (a write to a broken stderr) can come before the stop.
            let kill_at = kill_at(&guard, args);
            let emptied = stop_group(
                &mut job,
                kill_at,
                kill_grace(args),
                &signals,
                Some((&mut watcher, &guard)),
            );
            // A watcher that killed the job first (this process was
            // stopped past its kill point) is the story, not what this
            // process found when it resumed.
            let why = if watcher.has_killed_job() {
                killed_by_watcher(args)
            } else {
                format!("{why}: the command was stopped")
            };
            watcher.done();
            if let Some(t) = &terminal {
                t.give_back(group);
            }
            end_lease(guard, emptied);
            say!("redmutex: {why}");
            if !emptied {
                say_stuck(args);
            }
            ExitCode::from(LOST)
        }
    }
}

/// How long the end of a hold after a stop waits for Redis at most: the
/// job was stopped because the lease could not be promised, most often
/// because Redis cannot be reached, where a release would wait out the
/// pool's checkout timeout (2 s) for nothing. Past this, the key expires
/// by itself at the lease's end, as it would after a failed release.
const END_AFTER_STOP: Duration = Duration::from_millis(500);

/// Ends the hold after a stop (see [`end_lease_now`]) on a thread of its
/// own, waiting for it at most [`END_AFTER_STOP`]: this process exits
/// soon after its job, whatever Redis does. Without a thread, it ends
/// the hold here.
fn end_lease(guard: Guard, emptied: bool) {
    let (done, ended) = mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("release".into())
        .spawn(move || {
            end_lease_now(guard, emptied);
            let _ = done.send(());
        });
    if spawned.is_ok() && ended.recv_timeout(END_AFTER_STOP).is_err() {
        log::warn!(
            target: "redmutex::run",
            "the release was not confirmed within {}: the lock expires by itself at the \
             lease's end",
            show(END_AFTER_STOP)
        );
    }
}

/// Ends the hold after a stop: released when the group has exited; else
/// (a process of it outlived its SIGKILL: in uninterruptible sleep, or
/// slow to exit) not released but no longer renewed: the key is left to
/// expire at the lease's local deadline (owner checked, no DEL), so the
/// lock is not given away before the lease would have ended anyway.
fn end_lease_now(guard: Guard, emptied: bool) {
    if emptied {
        drop(guard);
        return;
    }
    let at = guard.valid_until();
    if at > Instant::now() + Duration::from_millis(2) {
        // A Redis error leaves the key to expire at its own TTL.
        let _ = guard.expire_at(at);
    } else {
        // At or past its deadline the lease is lost (nothing renews it),
        // and an `expire_at` this close would be a release: not dropped
        // either, since dropping releases.
        std::mem::forget(guard);
    }
}

/// The message when the watcher killed the command.
fn killed_by_watcher(args: &RunArgs) -> String {
    format!(
        "the watcher process killed the command: the lease of lock {:?} was not renewed in \
         time (redmutex was stopped or stuck)",
        args.key
    )
}

/// The message when the group did not empty after its SIGKILL.
fn say_stuck(args: &RunArgs) {
    say!(
        "redmutex: processes of the command's group were still alive {} after SIGKILL: lock \
         {:?} is not released, it expires at the lease's end",
        show(kill_grace(args)),
        args.key
    );
}

/// The command ended by itself: release (or, with `--min-hold`, let the
/// lock expire then) and pass its exit code through, unless the lease was
/// lost meanwhile.
fn finish(guard: Guard, status: ExitStatus, args: &RunArgs, taken_at: Instant) -> ExitCode {
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c & 0xff).unwrap_or(1),
        (None, Some(n)) => u8::try_from(128 + n).unwrap_or(255),
        (None, None) => 1,
    };
    let until = args.min_hold.and_then(|m| taken_at.checked_add(m));
    let released = match until {
        Some(t) if t > Instant::now() => guard.expire_at(t),
        _ => guard.unlock(),
    };
    match released {
        Ok(()) => ExitCode::from(code),
        Err(Error::Lost { .. }) => {
            say!(
                "redmutex: the lease of lock {:?} was lost while the command ran",
                args.key
            );
            ExitCode::from(LOST)
        }
        Err(e) => {
            // The lock was ours throughout as far as anyone can tell; it
            // expires at its TTL.
            say!(
                "redmutex: releasing lock {:?} failed, it expires by itself: {}: {}",
                args.key,
                shown(&args.server),
                chain(&e)
            );
            ExitCode::from(code)
        }
    }
}
