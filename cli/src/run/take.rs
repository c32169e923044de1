//! Taking the lock: one attempt, or a wait that goes on through connection
//! errors, called off by a signal.

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redmutex::{Error, Guard, LockInfo, Locker};

use super::signals::signalled;
use crate::args::RunArgs;
use crate::connect::shown;
use crate::duration::show;
use crate::exit::{chain, failed, UNAVAILABLE};

/// The first pause after a connection error while waiting; it doubles
/// after each error in a row, up to [`MOST_PAUSE`].
const LEAST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause after a connection error while waiting.
const MOST_PAUSE: Duration = Duration::from_secs(2);

/// Takes the lock: one attempt with `-n`; else waits, until `-w` runs out
/// or for good. While waiting, connection errors (Redis restarting, a
/// failover, a cut link) are logged at `warn` and retried within the wait,
/// after a pause that doubles from 100 ms to 2 s; but a Redis that has
/// never answered (a wrong or dead URL) ends the run at once. `Err` with
/// the exit code when the run ends without the lock, the reason said.
pub fn take(
    locker: &Locker,
    args: &RunArgs,
    stop: &AtomicBool,
    signals: &mpsc::Receiver<i32>,
) -> Result<Guard, ExitCode> {
    let key = &args.key;
    let start = Instant::now();
    // The first attempt says whether Redis answers at all.
    match locker.try_lock(key) {
        Ok(Some(guard)) => return Ok(guard),
        Ok(None) if args.nonblock => {
            say!("redmutex: lock {key:?} is busy{}", holder_of(locker, key));
            return Err(ExitCode::from(args.conflict_exit_code));
        }
        Ok(None) => {}
        Err(e) => return Err(failed(&e, &shown(&args.server))),
    }
    let deadline = args.wait.and_then(|w| start.checked_add(w));
    let mut last: Option<Error> = None;
    let mut pause = LEAST_PAUSE;
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Err(gave_up(locker, args, start, last.as_ref()));
        }
        let error = match locker.lock_or_stop(key, left, stop) {
            Ok(guard) => match full_lease(&guard, args.ttl) {
                Ok(()) => return Ok(guard),
                // The claim ran out, or was taken, before its take-up: the
                // guard goes (released if still ours), the wait goes on.
                Err(e @ Error::Lost { .. }) => e,
                Err(e) if e.is_connection() => e,
                Err(e) => return Err(failed(&e, &shown(&args.server))),
            },
            Err(Error::Timeout { .. }) => return Err(gave_up(locker, args, start, last.as_ref())),
            Err(Error::Cancelled { .. }) => return Err(signalled(signals)),
            Err(e) if e.is_connection() => e,
            Err(e) => return Err(failed(&e, &shown(&args.server))),
        };
        log::warn!(
            target: "redmutex::run",
            "lock {key:?}: waiting goes on after an error, retried in {}: {}",
            show(pause),
            chain(&error)
        );
        last = Some(error);
        let wake = deadline.map_or(pause, |d| {
            pause.min(d.saturating_duration_since(Instant::now()))
        });
        // A signal meanwhile calls the wait off, as during the wait itself.
        if let Ok(signal) = signals.recv_timeout(wake) {
            return Err(ExitCode::from(u8::try_from(128 + signal).unwrap_or(255)));
        }
        pause = (pause * 2).min(MOST_PAUSE);
    }
}

/// A lock handed over by a release comes with the hand-over's short claim
/// (a few seconds), which the guard's watchdog takes up to the TTL right
/// after `lock` returns. The job must not start on the claim (the kill
/// grace and margin are counted from the TTL, and a claim that is not
/// taken up ends within seconds), so a guard with less than two thirds of
/// the TTL left is taken up here first: one renewal to the TTL, confirmed
/// before the job starts.
fn full_lease(guard: &Guard, ttl: Duration) -> Result<(), Error> {
    let full = Instant::now().checked_add(ttl * 2 / 3);
    if full.is_some_and(|full| guard.valid_until() >= full) {
        return Ok(());
    }
    guard.extend(ttl)
}

/// The wait ran out without the lock: the conflict code, saying how long it
/// waited and who holds the lock; 69 when Redis could not be reached at the
/// end, with the last error.
fn gave_up(locker: &Locker, args: &RunArgs, start: Instant, last: Option<&Error>) -> ExitCode {
    let key = &args.key;
    let waited = start.elapsed();
    let waited = Duration::from_millis(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX));
    match locker.holder(key) {
        Err(e) if e.is_connection() => {
            let last = last.unwrap_or(&e);
            say!(
                "redmutex: gave up on lock {key:?} after waiting {}: Redis at {} cannot be \
                 reached: {}",
                show(waited),
                shown(&args.server),
                chain(last)
            );
            ExitCode::from(UNAVAILABLE)
        }
        holder => {
            let held = match holder {
                Ok(Some(info)) => format!("; {}", held_by(&info)),
                _ => String::new(),
            };
            let error = last.map_or(String::new(), |e| {
                format!(" (an error on the way: {})", chain(e))
            });
            say!(
                "redmutex: lock {key:?} is busy: waited {}{held}{error}",
                show(waited)
            );
            ExitCode::from(args.conflict_exit_code)
        }
    }
}

/// `: held by ...` for a busy message: who holds `key`, if that can be
/// told.
fn holder_of(locker: &Locker, key: &str) -> String {
    match locker.holder(key) {
        Ok(Some(info)) => format!(": {}", held_by(&info)),
        _ => String::new(),
    }
}

/// `held by <metadata>, <ms> ms left, fencing token <n>`.
fn held_by(info: &LockInfo) -> String {
    format!(
        "held by {:?}, {} ms left, fencing token {}",
        info.metadata(),
        info.ttl().as_millis(),
        info.fencing_token()
    )
}
