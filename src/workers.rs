//! Parked threads that watchdogs borrow, so that taking a lock spawns no
//! thread: spawning and joining one costs about a Redis round trip.
//!
//! A guard's watchdog runs as a job on a worker thread of this process-wide
//! pool. While the guard lives the thread is its own; when the job ends the
//! thread parks, ready for the next guard. At most [`MAX_PARKED`] threads
//! stay parked, each for at most [`PARK_LIFETIME`]; the others end.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SendError, Sender};
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

/// A job returns the sender its `Done` waits on: the worker drops it only
/// after parking, so a guard dropped in a loop finds the thread parked again.
type Job = Box<dyn FnOnce() -> Sender<()> + Send>;

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

/// Waits for a job to finish (see [`run`]). The receiver sits in a mutex
/// only so that `Done` (and the guard holding it) is `Sync`; nothing locks it
/// but `wait`, which owns it.
#[derive(Debug)]
pub(crate) struct Done(Mutex<Receiver<()>>);

impl Done {
    /// Blocks until the job has returned and everything it captured has been
    /// dropped (or the worker died).
    pub(crate) fn wait(self) {
        // Nothing is ever sent: the sender's drop is the signal.
        let _ = self.0.into_inner().recv();
    }
}

/// Runs `job` on a parked worker, or on a new one when none is parked.
pub(crate) fn run(job: impl FnOnce() + Send + 'static) -> io::Result<Done> {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut job: Job = Box::new(move || {
        WORKERS.running.fetch_add(1, Ordering::Relaxed);
        job();
        WORKERS.running.fetch_sub(1, Ordering::Relaxed);
        // `job` and its captures are gone and the count is down; the worker
        // drops this sender (the signal `Done` waits for) once parked.
        done_tx
    });
    loop {
        let Some((_, tx)) = WORKERS.parked.lock().pop() else {
            break;
        };
        match tx.send(job) {
            Ok(()) => return Ok(Done(Mutex::new(done_rx))),
            // That worker has ended: try the next one.
            Err(SendError(back)) => job = back,
        }
    }
    let id = WORKERS.next_id.fetch_add(1, Ordering::Relaxed);
    thread::Builder::new()
        .name("redmutex-watchdog".into())
        .stack_size(STACK_SIZE)
        .spawn(move || work(id, job))?;
    Ok(Done(Mutex::new(done_rx)))
}

fn work(id: u64, first: Job) {
    let (tx, rx) = mpsc::channel::<Job>();
    let mut job = first;
    loop {
        let done = job();
        {
            let mut parked = WORKERS.parked.lock();
            if parked.len() >= MAX_PARKED {
                return;
            }
            parked.push((id, tx.clone()));
        }
        drop(done);
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
/// lease, and those parked for the next guard. A guard's watchdog stops
/// (and its thread parks or ends) before the guard's drop returns.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let guard = locker.lock("k")?;
/// assert_eq!(redmutex::watchdog_threads().running, 1);
/// drop(guard);
/// assert_eq!(redmutex::watchdog_threads().running, 0);
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
    use std::sync::Arc;

    #[test]
    fn done_waits_for_the_job_and_its_captures() {
        let marker = Arc::new(());
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let held = Arc::clone(&marker);
        let done = run(move || {
            let _keep = held;
            let _ = go_rx.recv();
        })
        .unwrap();
        assert_eq!(Arc::strong_count(&marker), 2);
        go_tx.send(()).unwrap();
        done.wait();
        assert_eq!(
            Arc::strong_count(&marker),
            1,
            "captures dropped before done"
        );
    }

    #[test]
    fn threads_are_reused() {
        run(|| {}).unwrap().wait();
        // The worker parks before it signals done.
        assert!(watchdog_threads().parked >= 1);
        let name = Arc::new(Mutex::new(String::new()));
        let seen = Arc::clone(&name);
        run(move || *seen.lock() = thread::current().name().unwrap_or("").to_owned())
            .unwrap()
            .wait();
        assert_eq!(&*name.lock(), "redmutex-watchdog");
    }
}
