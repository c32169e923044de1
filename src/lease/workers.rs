//! Parked threads that watchdogs borrow, so that taking a lock spawns no
//! thread: spawning and joining one costs about a Redis round trip.
//!
//! A guard's watchdog runs as a job on a worker thread of this process-wide
//! pool. While the guard lives the thread is its own; when the job ends the
//! thread parks, ready for the next guard. At most [`MAX_PARKED`] threads
//! stay parked, each for at most [`PARK_LIFETIME`]; the others end.
//!
//! A watchdog has nothing to do before its first renewal, a third of the
//! TTL after the grant, and most guards are gone by then. So a job is only
//! scheduled when the guard is granted ([`run_at`]): one thread per process,
//! the starter, hands it to a worker when that time comes, unless the guard
//! went first ([`cancel`]). Taking and releasing a short-lived lock then
//! wakes no thread at all: scheduling a job later than the starter's next
//! wake-up only pushes it on a heap.
//!
//! A child forked after its parent used watchdogs inherits this state but
//! none of the threads it names: every entry point first makes the state
//! this process's own ([`adopt`]), so a child's guards get a starter and
//! workers of their own.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SendError};
use std::sync::{Condvar as StdCondvar, LazyLock, Mutex as StdMutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::defaults::{MAX_PARKED, PARK_LIFETIME};
use crate::sync::mpsc::{self, Sender};
use crate::sync::Mutex;

/// Stack size of a worker: a watchdog formats a command and parses a small
/// reply, nothing deep.
const STACK_SIZE: usize = 128 * 1024;

type Job = Box<dyn FnOnce() + Send>;

struct Workers {
    parked: Parked<Job>,
    next_id: AtomicU64,
    running: AtomicUsize,
}

static WORKERS: LazyLock<Workers> = LazyLock::new(|| Workers {
    parked: Parked::new(),
    next_id: AtomicU64::new(0),
    running: AtomicUsize::new(0),
});

/// The parked workers, and the hand-off of a job to one of them. A worker
/// whose wait times out as a job is handed to it either leaves the list
/// first (and the job goes elsewhere) or finds itself taken off it (and
/// receives the job): a job is never lost nor run twice (checked by loom).
struct Parked<J> {
    /// Each parked worker's id and the sender of its job channel.
    list: Mutex<Vec<(u64, Sender<J>)>>,
}

impl<J> Parked<J> {
    fn new() -> Self {
        Parked {
            list: Mutex::new(Vec::new()),
        }
    }

    /// Hands `job` to the last parked worker still listening; gives it back
    /// when none is.
    fn hand(&self, mut job: J) -> Result<(), J> {
        loop {
            let Some((_, tx)) = self.list.lock().pop() else {
                return Err(job);
            };
            match tx.send(job) {
                Ok(()) => return Ok(()),
                // That worker has ended: try the next one.
                Err(SendError(back)) => job = back,
            }
        }
    }

    /// Parks worker `id`, reached through `tx`; `false` when enough are
    /// parked already (the worker ends).
    fn park(&self, id: u64, tx: Sender<J>) -> bool {
        let mut list = self.list.lock();
        if list.len() >= MAX_PARKED {
            return false;
        }
        list.push((id, tx));
        true
    }

    /// Worker `id`, whose wait timed out, leaves the list: `false` when
    /// someone took it off just now, so that its job is on the way.
    fn leave(&self, id: u64) -> bool {
        let mut list = self.list.lock();
        match list.iter().position(|(p, _)| *p == id) {
            Some(i) => {
                list.swap_remove(i);
                true
            }
            None => false,
        }
    }

    fn len(&self) -> usize {
        self.list.lock().len()
    }

    /// Forgets every parked worker, in a forked child where none of them
    /// exists: their senders are leaked, not dropped, since their channels
    /// are the parent's.
    fn forget_all(&self) {
        std::mem::forget(std::mem::take(&mut *self.list.lock()));
    }
}

/// The process this module's state belongs to (0: none yet).
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Makes this module's state this process's own. In a child forked after
/// its parent used watchdogs, the starter is marked spawned and workers are
/// parked, but none of those threads exists here: a job scheduled or handed
/// to them would never run, and the child's guards would lose their
/// leases. So the first call in a new process forgets them (the parent's
/// scheduled jobs too: they renew the parent's guards, and are leaked
/// rather than dropped), and the next job gets a starter and a worker of
/// its own. One atomic load and a `getpid` when nothing changed.
fn adopt() {
    let pid = std::process::id();
    if OWNER.load(Ordering::Acquire) == pid {
        return;
    }
    let mut s = schedule();
    if s.pid != pid {
        std::mem::forget(std::mem::take(&mut s.jobs));
        s.heap.clear();
        s.wakes_at = None;
        s.spawned = false;
        // `next_id` goes on: an id the parent handed out names no job here.
        s.pid = pid;
        WORKERS.parked.forget_all();
        WORKERS.running.store(0, Ordering::Relaxed);
    }
    OWNER.store(pid, Ordering::Release);
}

/// Runs `job` on a parked worker, or on a new one when none is parked.
pub(crate) fn run(job: impl FnOnce() + Send + 'static) -> io::Result<()> {
    adopt();
    let Err(job) = WORKERS.parked.hand(Box::new(job)) else {
        return Ok(());
    };
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
        if !WORKERS.parked.park(id, tx.clone()) {
            return;
        }
        job = match rx.recv_timeout(PARK_LIFETIME) {
            Ok(next) => next,
            Err(RecvTimeoutError::Timeout) => {
                if WORKERS.parked.leave(id) {
                    return;
                }
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

/// Jobs waiting for their start time, and the starter thread's schedule.
#[derive(Default)]
struct Schedule {
    /// Start times and job ids, earliest first. Ids whose job is gone
    /// (cancelled, or moved earlier) are skipped when they come up.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The jobs still to start, by id.
    jobs: HashMap<u64, Job>,
    /// When the starter wakes up next, if it is running and asleep.
    wakes_at: Option<Instant>,
    /// Whether the starter thread has been spawned (in process `pid`).
    spawned: bool,
    /// The process this schedule belongs to (see [`adopt`]).
    pid: u32,
    /// The lead time of the latest job: how long the starter sleeps when it
    /// has nothing to start, so that a job like it needs no wake-up.
    lead: Duration,
    next_id: u64,
}

/// The schedule and what the starter sleeps on: `std`'s, not
/// `parking_lot`'s, whose queue of parked threads lives in user memory. A
/// child forked while its parent's starter slept would inherit that
/// thread's entry in the queue; and since the child's new threads reuse
/// the stacks (and thread-locals) of the parent's other threads, its own
/// starter could then corrupt the queue. `std`'s futex-based ones keep no
/// such list.
struct Starter {
    schedule: StdMutex<Schedule>,
    changed: StdCondvar,
}

static STARTER: LazyLock<Starter> = LazyLock::new(|| Starter {
    schedule: StdMutex::new(Schedule::default()),
    changed: StdCondvar::new(),
});

/// The schedule, locked. Nothing panics while holding it, so it is never
/// poisoned; if it were, its data would still be whole.
fn schedule() -> MutexGuard<'static, Schedule> {
    STARTER
        .schedule
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The longest the starter sleeps with nothing to start.
const STARTER_IDLE: Duration = Duration::from_secs(1);

/// Runs `job` on a worker at `at` (at once if `at` has passed), unless it is
/// cancelled first. Returns its id for [`cancel`] and [`advance`]; a job run
/// at once gets `u64::MAX`, which names no scheduled job, so both do nothing
/// with it.
pub(crate) fn run_at(at: Instant, job: impl FnOnce() + Send + 'static) -> io::Result<u64> {
    adopt();
    let now = Instant::now();
    if at <= now {
        run(job)?;
        return Ok(u64::MAX);
    }
    let mut s = schedule();
    if !s.spawned {
        thread::Builder::new()
            .name("redmutex-starter".into())
            .stack_size(STACK_SIZE)
            .spawn(starter)?;
        s.spawned = true;
    }
    let id = s.next_id;
    s.next_id = s.next_id.wrapping_add(1);
    s.jobs.insert(id, Box::new(job));
    s.heap.push(Reverse((at, id)));
    s.lead = at - now;
    if s.wakes_at.is_none_or(|w| at < w) {
        STARTER.changed.notify_one();
    }
    Ok(id)
}

/// Makes a scheduled job start no later than `at`. Returns false when it
/// has started already (or was cancelled).
pub(crate) fn advance(id: u64, at: Instant) -> bool {
    adopt();
    let mut s = schedule();
    if !s.jobs.contains_key(&id) {
        return false;
    }
    s.heap.push(Reverse((at, id)));
    if s.wakes_at.is_none_or(|w| at < w) {
        STARTER.changed.notify_one();
    }
    true
}

/// Drops a scheduled job that has not started. Never wakes a thread.
pub(crate) fn cancel(id: u64) {
    adopt();
    let mut s = schedule();
    if s.jobs.remove(&id).is_some() && s.heap.len() > 64 && s.heap.len() > 2 * s.jobs.len() {
        // Mostly cancelled entries: keep the heap from growing with them.
        let live = &s.jobs;
        let kept: BinaryHeap<_> = s
            .heap
            .iter()
            .filter(|Reverse((_, id))| live.contains_key(id))
            .copied()
            .collect();
        s.heap = kept;
    }
}

/// The starter thread: hands each job to a worker when its time comes.
fn starter() {
    let mut s = schedule();
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some(&Reverse((at, id))) = s.heap.peek() {
            if at > now {
                break;
            }
            s.heap.pop();
            if let Some(job) = s.jobs.remove(&id) {
                due.push(job);
            }
        }
        if !due.is_empty() {
            s.wakes_at = None;
            drop(s);
            for job in due {
                // A worker that cannot be had leaves the lease unrenewed:
                // it is reported lost at its deadline.
                let _ = run(job);
            }
            s = schedule();
            continue;
        }
        let idle = s.lead.min(STARTER_IDLE);
        let wake = match s.heap.peek() {
            Some(&Reverse((at, _))) => at,
            None => now + idle,
        };
        s.wakes_at = Some(wake);
        s = STARTER
            .changed
            .wait_timeout(s, wake.saturating_duration_since(Instant::now()))
            .map_or_else(|e| e.into_inner().0, |(s, _)| s);
        s.wakes_at = None;
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
    /// Guards whose watchdog starts at their first renewal, a third of the
    /// TTL after the grant (none runs before: nothing is due).
    pub pending: usize,
}

/// Counts this process's watchdog threads: those renewing a live guard's
/// lease, and those parked for the next guard; and the guards whose
/// watchdog has not started yet. When a guard goes, its lease
/// stops being renewed before the drop returns; its thread finishes and
/// parks (or ends) a moment later, on its own.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let guard = locker.lock("k")?;
/// let t = redmutex::watchdog_threads();
/// println!("{} renewing, {} parked, {} to start", t.running, t.parked, t.pending);
/// # drop(guard);
/// # Ok::<(), redmutex::Error>(())
/// ```
pub fn watchdog_threads() -> WatchdogThreads {
    adopt();
    WatchdogThreads {
        running: WORKERS.running.load(Ordering::Relaxed),
        parked: WORKERS.parked.len(),
        pending: schedule().jobs.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_and_threads_are_reused() {
        // Other unit tests run watchdog jobs on the same process-wide
        // workers at the same time, so one hand-over may go to (or come
        // from) their worker; across twenty jobs run one after another,
        // each given when a worker is parked, a thread must come back.
        let (tx, rx) = mpsc::channel();
        let mut seen = std::collections::HashSet::new();
        let mut reused = false;
        for _ in 0..20 {
            let give_up = std::time::Instant::now() + Duration::from_secs(10);
            while watchdog_threads().parked == 0 && std::time::Instant::now() < give_up {
                thread::yield_now();
            }
            let tx = tx.clone();
            run(move || tx.send(thread::current().id()).unwrap()).unwrap();
            let id = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            reused |= !seen.insert(id);
        }
        assert!(reused, "no parked worker ran a later job");
    }

    #[test]
    fn scheduled_jobs_start_on_time_unless_cancelled() {
        let (tx, rx) = mpsc::channel();
        let now = Instant::now();
        let (late, early, gone) = (tx.clone(), tx.clone(), tx);
        let a = run_at(now + Duration::from_secs(3600), move || {
            late.send("late").unwrap()
        })
        .unwrap();
        let b = run_at(now + Duration::from_millis(20), move || {
            early.send("early").unwrap()
        })
        .unwrap();
        let c = run_at(now + Duration::from_millis(10), move || {
            gone.send("gone").unwrap()
        })
        .unwrap();
        cancel(c);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "early");
        assert!(!advance(b, now), "b has started");
        assert!(advance(a, now), "a is still scheduled");
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "late");
        // The cancelled job never runs; every sender is gone.
        assert!(rx.recv_timeout(Duration::from_secs(10)).is_err());
    }
}

/// `RUSTFLAGS="--cfg loom" cargo test --release --lib loom`: every
/// interleaving of a job's hand-off with the wait of the worker it goes to
/// timing out, within loom's bounds. Loom has no clock: the worker's wait
/// times out at any point relative to the hand-off.
#[cfg(all(test, loom))]
#[allow(clippy::unwrap_used, clippy::panic)]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// Worker 7 parks, then its wait times out while job 42 is handed out:
    /// `flawed` workers end on a timeout without looking whether they were
    /// taken. The job must run exactly once.
    fn hand_off_as_the_wait_times_out(flawed: bool) {
        loom::model(move || {
            let parked = Arc::new(Parked::new());
            let (tx, rx) = mpsc::channel::<u32>();
            assert!(parked.park(7, tx.clone()));
            let worker = {
                let parked = Arc::clone(&parked);
                loom::thread::spawn(move || {
                    let left = parked.leave(7);
                    if left || flawed {
                        return None;
                    }
                    Some(rx.recv().unwrap())
                })
            };
            let handed = parked.hand(42);
            let received = worker.join().unwrap();
            // The worker keeps its own sender, as `work` does.
            drop(tx);
            match (handed, received) {
                // Handed to the worker, which runs it; or handed back, to
                // run on a new thread.
                (Ok(()), Some(42)) | (Err(42), None) => {}
                other => panic!("the job was lost or doubled: {other:?}"),
            }
        });
    }

    /// A job is never lost nor run twice, and no worker waits for a job
    /// that never comes (loom reports a deadlock).
    #[test]
    fn loom_a_job_handed_to_a_worker_timing_out_runs_once() {
        hand_off_as_the_wait_times_out(false);
    }

    /// The negative control: a worker that ends on a timeout without
    /// looking whether it was taken off the list loses a job.
    #[test]
    #[should_panic(expected = "lost or doubled")]
    fn loom_a_worker_that_ends_on_every_timeout_loses_a_job() {
        hand_off_as_the_wait_times_out(true);
    }
}
