//! Parked threads that watchdogs borrow, so that taking a lock spawns no
//! thread: spawning and joining one costs about a Redis round trip.
//!
//! A guard's watchdog runs as a job on a worker thread of this process-wide
//! pool. While the guard lives the thread is its own; when the job ends the
//! thread parks, ready for the next guard. At most [`MAX_PARKED`] threads
//! stay parked, each for at most [`PARK_LIFETIME`]; the others end.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SendError, Sender};
use std::sync::LazyLock;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

/// Most threads kept parked for later guards.
pub(crate) const MAX_PARKED: usize = 64;

/// How long a parked thread waits for a job before it ends.
pub(crate) const PARK_LIFETIME: Duration = Duration::from_secs(60);

/// Stack size of a worker: a watchdog formats a command and parses a small
/// reply, nothing deep.
const STACK_SIZE: usize = 128 * 1024;

type Job = Box<dyn FnOnce() + Send>;

struct Workers {
    /// Parked workers: an id and the sender of their job channel.
    parked: Mutex<Vec<(u64, Sender<Job>)>>,
    next_id: AtomicU64,
    running: AtomicUsize,
}

static WORKERS: LazyLock<Workers> = LazyLock::new(|| Workers {
    parked: Mutex::new(Vec::new()),
    next_id: AtomicU64::new(0),
    running: AtomicUsize::new(0),
});

/// Runs `job` on a parked worker, or on a new one when none is parked.
pub(crate) fn run(job: impl FnOnce() + Send + 'static) -> io::Result<()> {
    let mut job: Job = Box::new(job);
    loop {
        let Some((_, tx)) = WORKERS.parked.lock().pop() else {
            break;
        };
        match tx.send(job) {
            Ok(()) => return Ok(()),
            // That worker has ended: try the next one.
            Err(SendError(back)) => job = back,
        }
    }
    let id = WORKERS.next_id.fetch_add(1, Ordering::Relaxed);
    thread::Builder::new()
        .name("redmutex-watchdog".into())
        .stack_size(STACK_SIZE)
        .spawn(move || work(id, job))?;
    Ok(())
}

fn work(id: u64, first: Job) {
    let (tx, rx) = mpsc::channel::<Job>();
    let mut job = first;
    loop {
        WORKERS.running.fetch_add(1, Ordering::Relaxed);
        job();
        WORKERS.running.fetch_sub(1, Ordering::Relaxed);
        {
            let mut parked = WORKERS.parked.lock();
            if parked.len() >= MAX_PARKED {
                return;
            }
            parked.push((id, tx.clone()));
        }
        job = match rx.recv_timeout(PARK_LIFETIME) {
            Ok(next) => next,
            Err(RecvTimeoutError::Timeout) => {
                let mut parked = WORKERS.parked.lock();
                if let Some(i) = parked.iter().position(|(p, _)| *p == id) {
                    parked.swap_remove(i);
                    return;
                }
                drop(parked);
                // Someone took this worker off the list just now: its job is
                // on the way.
                match rx.recv() {
                    Ok(next) => next,
                    Err(_) => return,
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
    }
}

/// How many worker threads this process has, by state. See
/// [`watchdog_threads`](crate::watchdog_threads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchdogThreads {
    /// Threads keeping a guard's lease alive right now.
    pub running: usize,
    /// Threads parked, ready for the next guard.
    pub parked: usize,
}

/// Counts this process's watchdog threads: those renewing a live guard's
/// lease, and those parked for the next guard. When a guard goes, its lease
/// stops being renewed before the drop returns; its thread finishes and
/// parks (or ends) a moment later, on its own.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let guard = locker.lock("k")?;
/// let t = redmutex::watchdog_threads();
/// println!("{} renewing, {} parked", t.running, t.parked);
/// # drop(guard);
/// # Ok::<(), redmutex::Error>(())
/// ```
pub fn watchdog_threads() -> WatchdogThreads {
    WatchdogThreads {
        running: WORKERS.running.load(Ordering::Relaxed),
        parked: WORKERS.parked.lock().len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_and_threads_are_reused() {
        let (tx, rx) = mpsc::channel();
        let first = tx.clone();
        run(move || first.send(thread::current().id()).unwrap()).unwrap();
        let a = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // Wait (bounded) for that worker to park, then hand it a second job.
        let give_up = std::time::Instant::now() + Duration::from_secs(10);
        while watchdog_threads().parked == 0 && std::time::Instant::now() < give_up {
            thread::yield_now();
        }
        run(move || tx.send(thread::current().id()).unwrap()).unwrap();
        let b = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(a, b, "the parked worker ran the second job");
    }
}
