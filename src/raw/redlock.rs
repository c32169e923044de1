//! Redlock only (several independent masters): the proposal of a fencing
//! token, the write-back that makes the masters agree on it, the masters
//! where a call that puts our keys may still arrive, each master's
//! breaker, and the fan-out that asks the masters at once: a lock's and
//! an unlock's script written to every master from the caller's thread,
//! then each reply read (`ask_everywhere`); other calls on threads the
//! locker keeps (`FanOut`).

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Value;

use crate::conn::Sent;
use crate::protocol::replies;
use crate::protocol::scripts::{self, Call};
use crate::quorum::{self, Grant, Raised};
use crate::time;
use crate::Error;

use super::{Acquisition, Queue, RawLock};

/// How far ahead of this machine's clock a Redlock proposal is (half the
/// TTL when that is shorter): past the masters' clocks (a one-way trip, and
/// their skew against ours), so that they mint it rather than their own
/// clock.
const PROPOSAL_LEAD: Duration = Duration::from_secs(1);

/// The most a Redlock proposal may lead a master's own clock (the TTL when
/// that is shorter); a master mints its clock plus this rather than a
/// proposal further ahead. A client clock that runs fast would otherwise
/// push every counter as far ahead, and tokens would fall back by as much
/// once the masters lost their data: bounded so, they keep rising across a
/// restart without data that comes no sooner than the TTL after the crash.
/// Twice the lead, so that a client clock up to a lead fast still has its
/// proposal minted as it is.
const PROPOSAL_BOUND: Duration = Duration::from_secs(2);

/// The lead and the bound of a Redlock proposal for a lock of `ttl`, see
/// [`PROPOSAL_LEAD`] and [`PROPOSAL_BOUND`].
pub(super) fn proposal_lead_and_bound(ttl: Duration) -> (Duration, Duration) {
    (PROPOSAL_LEAD.min(ttl / 2), PROPOSAL_BOUND.min(ttl))
}

impl Acquisition {
    /// Redlock: the fencing token this attempt asks every master to mint,
    /// this machine's clock in µs plus `lead` (and above any counter a
    /// refused attempt saw). When every master mints it, they are left as
    /// the grant's write-back would leave them, so it is not needed; when
    /// one counts past it (or it leads that master's clock by more than
    /// [`PROPOSAL_BOUND`]), they mint apart and the write-back makes them
    /// agree, as before. None for a clock before 1970.
    pub(super) fn proposal(&self, lead: Duration, clock_ahead: Duration) -> Option<String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .saturating_add(clock_ahead)
            .saturating_add(lead);
        let micros = u64::try_from(now.as_micros()).ok()?;
        let floor = self.floor.load(Ordering::SeqCst).saturating_add(1);
        Some(micros.max(floor).to_string())
    }

    /// Notes the masters whose answer in `answers` was a connection
    /// failure of a call that puts our keys there (see `stalled`).
    pub(super) fn note_stalled<T>(&self, answers: &[Result<T, Error>]) {
        for (i, answer) in answers.iter().enumerate().take(64) {
            if matches!(answer, Err(e) if e.is_connection()) {
                self.stalled.fetch_or(1 << i, Ordering::SeqCst);
            }
        }
    }

    /// Notes that a renewal sets its keys' TTL to `ttl` (see
    /// `longest_ttl`).
    pub(super) fn note_ttl(&self, ttl: Duration) {
        self.longest_ttl
            .fetch_max(time::millis_ceil(ttl), Ordering::SeqCst);
    }

    /// The longest a key of ours may live after the call that put it there:
    /// `ttl` (the locker's), or longer where a renewal asked for longer.
    pub(super) fn longest_ttl(&self, ttl: Duration) -> Duration {
        ttl.max(Duration::from_millis(
            self.longest_ttl.load(Ordering::SeqCst),
        ))
    }

    /// Whether a call that puts our keys on master `i` may still arrive.
    pub(super) fn stalled_on(&self, i: usize) -> bool {
        i < 64 && self.stalled.load(Ordering::SeqCst) & (1 << i) != 0
    }
}

/// How many times a Redlock grant tries to take the instances where a rival
/// held the lock for a moment before it gives the grant up.
const REPAIR_TRIES: u32 = 3;

impl RawLock {
    /// Redlock only: makes every instance's counter (and the lock's `fence`
    /// field) at least `fence`, the largest token of this grant, so that any
    /// later majority overlaps an instance that counts above it, and takes
    /// the lock on the instances where it is free (a grant on a bare
    /// majority). Needs a majority to confirm.
    /// Says whether the lock is now ours on every instance that answered
    /// (instances that did not answer count as down, not as taken). Tries
    /// again, at most [`REPAIR_TRIES`] times, while an instance answers that
    /// another client holds the lock there: a rival's failed attempt
    /// releases it a round trip later.
    ///
    /// Only the instances that `answered` this attempt's acquire are
    /// written to: on the others the acquire may still be on its way, with
    /// its clean-up behind it on the same connection (see
    /// [`RawLock::acquire_on`]), which would delete what the write-back
    /// put there; they count as down, as they did for the grant.
    pub(super) fn raise_fences(
        self: &Arc<Self>,
        a: &Arc<Acquisition>,
        fence: u64,
        answered: &Arc<[bool]>,
    ) -> Result<bool, Error> {
        let mut tries = 0;
        loop {
            let everywhere = self.raise_fences_once(a, fence, Arc::clone(answered))?;
            tries += 1;
            if everywhere || tries >= REPAIR_TRIES {
                return Ok(everywhere);
            }
        }
    }

    fn raise_fences_once(
        self: &Arc<Self>,
        a: &Arc<Acquisition>,
        fence: u64,
        answered: Arc<[bool]>,
    ) -> Result<bool, Error> {
        let owner = a.owner();
        let noted = Arc::clone(a);
        let (this, a) = (Arc::clone(self), Arc::clone(a));
        let answers = self.fan.run(self.instances.len(), move |i| {
            if !answered.get(i).copied().unwrap_or(false) {
                return Err(Error::Redis(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "not written back: its acquire did not answer",
                ))));
            }
            let ttl = time::millis_ceil(this.config.ttl);
            let delay = time::millis_ceil(this.lock_delay(&a.keys));
            let metadata = &this.config.metadata;
            let call = scripts::raise_fence(&a.keys, fence, owner.as_str(), metadata, ttl, delay);
            let reply = this.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            Ok(replies::int_reply(&reply, "raise fence")? == 1)
        });
        noted.note_stalled(&answers);
        match quorum::decide_raise(answers) {
            Raised::Everywhere => Ok(true),
            Raised::Rival => Ok(false),
            Raised::NoQuorum { confirmed, last } => Err(Error::NoQuorum {
                granted: confirmed,
                needed: quorum::quorum(self.instances.len()),
                last: last.map(Box::new),
            }),
        }
    }
}

/// How long a master whose connection failed is skipped at first; each
/// failed try after a break doubles it, up to [`LONGEST_BREAK`]. The cap
/// weighs how long a master that came back may stay unused against how
/// often a dead one is tried (once per break, the try costing one call its
/// timeout when the master hangs rather than refuses).
const FIRST_BREAK: Duration = Duration::from_millis(500);
const LONGEST_BREAK: Duration = Duration::from_secs(2);

/// A Redlock master's breaker. A master that is down (refused, unreachable,
/// hung) would otherwise cost every lock, renewal and release its checkout
/// or I/O timeout; while its break lasts it is skipped (the call fails at
/// once, and counts against the majority as a failure would). The first
/// call after the break tries it again: a success closes the breaker, a
/// failure starts a break twice as long.
#[derive(Default)]
pub(super) struct Breaker {
    /// Until when the master is skipped, and the next break's length.
    state: Mutex<Option<(Instant, Duration)>>,
}

impl Breaker {
    /// `Err` while the break lasts.
    pub(super) fn check(&self) -> Result<(), Error> {
        match *self.state.lock() {
            Some((until, _)) if Instant::now() < until => {
                Err(Error::Redis(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    "skipped: this master's connection failed, it is tried again after a break",
                ))))
            }
            _ => Ok(()),
        }
    }

    /// Starts a break, unless one is on (calls that were under way when
    /// it began fail too, and must not lengthen it).
    pub(super) fn trip(&self) {
        let mut state = self.state.lock();
        let now = Instant::now();
        let length = match *state {
            Some((until, _)) if now < until => return,
            Some((_, next)) => next,
            None => FIRST_BREAK,
        };
        if let Some(until) = time::deadline(now, length) {
            *state = Some((until, (length * 2).min(LONGEST_BREAK)));
        }
    }

    pub(super) fn reset(&self) {
        let mut state = self.state.lock();
        if state.is_some() {
            *state = None;
        }
    }

    /// After a call that gave `result`: a break when its connection failed,
    /// closed otherwise.
    pub(super) fn note<T>(&self, result: &Result<T, Error>) {
        match result {
            Err(e) if e.is_connection() => self.trip(),
            _ => self.reset(),
        }
    }
}

impl RawLock {
    /// Redlock: [`RawLock::acquire_on`] on every instance at once, from this
    /// thread (see [`RawLock::ask_everywhere`]). `None` where that cannot
    /// serve: one instance; before each server's version was checked (the
    /// first acquisitions); with `min_replicas` (a `WAIT` follows each
    /// grant); connections that are not plain ones.
    pub(super) fn acquire_at_once(
        &self,
        a: &Acquisition,
        queue: Queue,
        proposal: Option<(&str, u64)>,
    ) -> Option<Vec<Result<Grant, Error>>> {
        let checked = || {
            self.version_checked
                .iter()
                .all(|c| c.load(Ordering::Relaxed))
        };
        if self.instances.len() < 2 || self.config.min_replicas > 0 || !checked() {
            return None;
        }
        let (call, undo) = self.acquire_call(a, queue, proposal);
        self.ask_everywhere(&call, Some(&undo), |reply| a.grant_in(&reply))
    }

    /// Runs `call` on every instance from this thread: its request written
    /// to each (past each breaker), then each reply read, within the I/O
    /// timeout from its writing, and given to `read`. So an operation costs
    /// about one round trip, the slowest instance's, and wakes no thread (a
    /// thread per instance costs its wake-up on every call, which on a busy
    /// machine outweighs the round trip). `undo`: as for
    /// [`Connector::run`](crate::conn::Connector::run).
    ///
    /// `None`, and nothing sent, unless every instance not in a break has
    /// a plain connection idle (see
    /// [`Connector::idle`](crate::conn::Connector::idle)): one instance, a
    /// cluster's connections, a pool busy or still connecting. The caller
    /// then asks on the fan-out threads, where each instance waits for its
    /// checkout beside the others; here none waits for one, so each still
    /// answers within its I/O timeout.
    pub(super) fn ask_everywhere<T>(
        &self,
        call: &Call,
        undo: Option<&redis::Cmd>,
        mut read: impl FnMut(Value) -> Result<T, Error>,
    ) -> Option<Vec<Result<T, Error>>> {
        if self.instances.len() < 2 {
            return None;
        }
        // The connections first: all of them, or none is used.
        let mut idle = Vec::with_capacity(self.instances.len());
        for (i, instance) in self.instances.iter().enumerate() {
            idle.push(match self.breakers.get(i).map_or(Ok(()), Breaker::check) {
                Ok(()) => Ok(instance.idle()?),
                Err(skipped) => Err(skipped),
            });
        }
        let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
        let request = call.request();
        let sent: Vec<Result<Asked, Error>> = idle
            .into_iter()
            .enumerate()
            .map(|(i, idle)| {
                let sent = idle?.send(checkout, io, &request, undo.cloned());
                if let (Err(_), Some(breaker)) = (&sent, self.breakers.get(i)) {
                    breaker.note(&sent);
                }
                Ok((sent?, Instant::now()))
            })
            .collect();
        let answers = sent.into_iter().enumerate().map(|(i, sent)| {
            let (sent, at) = sent?;
            let deadline = time::deadline(at, io).unwrap_or(at);
            let mut answer = None;
            let result = sent.reply(deadline, &mut |reply, c| {
                answer = Some(read(call.answer::<Value>(reply, c)?)?);
                Ok(Value::Nil)
            });
            if let Some(breaker) = self.breakers.get(i) {
                breaker.note(&result);
            }
            result?;
            answer.ok_or_else(|| replies::unexpected("a script", &Value::Nil))
        });
        Some(answers.collect())
    }
}

/// A request written to an instance, and when (see
/// [`RawLock::ask_everywhere`]).
type Asked = (Box<dyn Sent>, Instant);

/// What a fan-out thread runs: one call on one instance, which gives back
/// the sending of its result, done once the thread is idle again (so a
/// caller that goes on to its next operation finds it free).
type Job = Box<dyn FnOnce() -> Deliver + Send>;
type Deliver = Box<dyn FnOnce() + Send>;

/// A job on its way to a fan-out thread, with the sender of that thread's
/// channel, which the thread puts back on its instance's idle list when
/// the job is done.
struct Work {
    job: Job,
    back: mpsc::Sender<Work>,
}

/// An instance's idle fan-out threads: each one's id and the only sender of
/// its channel (so that dropping the list ends them).
type Idle = Mutex<Vec<(u64, mpsc::Sender<Work>)>>;

/// How long a fan-out thread with nothing to do waits for work before it
/// ends (one is started again when needed).
const FAN_OUT_IDLE: Duration = Duration::from_secs(30);

/// The threads that ask a Redlock locker's instances `1..` while the
/// calling thread asks instance 0. Per instance, threads started when
/// first needed and kept while they are used: a call goes to an idle one,
/// or to a new one when all are busy, so concurrent operations (one
/// thread's lock beside another's renewal) never queue behind each other's
/// calls. Once the locker is warm an operation starts no thread; a thread
/// idle for [`FAN_OUT_IDLE`] ends, and all of them end as soon as the
/// locker and its guards are gone (their channels close).
pub(crate) struct FanOut {
    /// Per instance past the first.
    idle: Vec<Arc<Idle>>,
    next_id: AtomicU64,
}

impl FanOut {
    pub(crate) fn new(instances: usize) -> FanOut {
        FanOut {
            idle: (1..instances).map(|_| Arc::default()).collect(),
            next_id: AtomicU64::new(0),
        }
    }

    /// Runs `f(i)` for every instance `i` in `0..n`, at once when `n > 1`
    /// (instance 0 on the caller's thread, the others on fan-out threads),
    /// and returns the results in instance order. Each call is bounded by
    /// its connection's timeouts, so the whole takes as long as the
    /// slowest. A call that cannot be run (no thread could start, or it
    /// panicked) fails with [`Error::Thread`], as a failed instance would.
    pub(crate) fn run<T, F>(&self, n: usize, f: F) -> Vec<Result<T, Error>>
    where
        T: Send + 'static,
        F: Fn(usize) -> Result<T, Error> + Send + Sync + 'static,
    {
        if n <= 1 {
            return (0..n).map(&f).collect();
        }
        let f = Arc::new(f);
        let (done, answers) = mpsc::channel();
        let mut results: Vec<Option<Result<T, Error>>> = (0..n).map(|_| None).collect();
        for i in 1..n {
            let (f, done) = (Arc::clone(&f), done.clone());
            let job: Job = Box::new(move || {
                let result = panic::catch_unwind(AssertUnwindSafe(|| f(i)))
                    .unwrap_or_else(|_| Err(thread_error("a Redlock call panicked")));
                Box::new(move || {
                    let _ = done.send((i, result));
                })
            });
            if let Err(e) = self.submit(i, job) {
                if let Some(slot) = results.get_mut(i) {
                    *slot = Some(Err(e));
                }
            }
        }
        // The answers end once every job has sent its result or is gone.
        drop(done);
        if let Some(slot) = results.first_mut() {
            *slot = Some(f(0));
        }
        for (i, result) in answers {
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(result);
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(thread_error("a Redlock call was lost"))))
            .collect()
    }

    /// Hands `job` to an idle thread of instance `i`, or to a new one.
    fn submit(&self, i: usize, mut job: Job) -> Result<(), Error> {
        let idle = i
            .checked_sub(1)
            .and_then(|w| self.idle.get(w))
            .ok_or_else(|| Error::InvalidInput(format!("no instance {i}")))?;
        loop {
            // Off the list, a thread waits for this job alone.
            let taken = idle.lock().pop();
            let Some((_, sender)) = taken else { break };
            let back = sender.clone();
            match sender.send(Work { job, back }) {
                Ok(()) => return Ok(()),
                // It ended meanwhile: the next one, or a new one.
                Err(mpsc::SendError(work)) => job = work.job,
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, works) = mpsc::channel();
        let list = Arc::downgrade(idle);
        thread::Builder::new()
            .name("redmutex-redlock".into())
            .spawn(move || fan_out_thread(id, &works, &list))
            .map_err(Error::Thread)?;
        let back = sender.clone();
        sender
            .send(Work { job, back })
            .map_err(|_| thread_error("a Redlock thread ended at once"))
    }
}

/// A fan-out thread: runs the work it is sent, going back on its
/// instance's idle list after each; ends when its channel closes (the
/// locker is gone) or after [`FAN_OUT_IDLE`] on the list.
fn fan_out_thread(id: u64, works: &mpsc::Receiver<Work>, list: &Weak<Idle>) {
    loop {
        match works.recv_timeout(FAN_OUT_IDLE) {
            Ok(Work { job, back }) => {
                let deliver = job();
                let list = list.upgrade();
                if let Some(list) = &list {
                    list.lock().push((id, back));
                }
                deliver();
                if list.is_none() {
                    return;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let Some(list) = list.upgrade() else { return };
                let mut idle = list.lock();
                if let Some(at) = idle.iter().position(|(i, _)| *i == id) {
                    // Off the list, nothing can be sent to it any more.
                    idle.swap_remove(at);
                    return;
                }
                // Taken by a caller whose work is on its way.
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn thread_error(what: &str) -> Error {
    Error::Thread(std::io::Error::other(what.to_owned()))
}

#[cfg(test)]
mod fan_out_tests {
    use super::*;

    #[test]
    fn fan_out_keeps_instance_order() {
        let fan = FanOut::new(5);
        for _ in 0..3 {
            let r = fan.run(5, |i| Ok(i * 10));
            let values: Vec<usize> = r.into_iter().map(Result::unwrap).collect();
            assert_eq!(values, [0, 10, 20, 30, 40]);
        }
        assert_eq!(fan.run(1, Ok).len(), 1);
    }

    #[test]
    fn a_panicking_call_fails_its_instance_only() {
        let fan = FanOut::new(3);
        let r = fan.run(3, |i| if i == 1 { panic!("boom") } else { Ok(i) });
        assert!(matches!(r.get(1), Some(Err(Error::Thread(_)))));
        assert!(matches!(r.get(2), Some(Ok(2))));
        // The thread that ran it is still there, or starts again.
        let r = fan.run(3, Ok);
        assert!(r.iter().all(Result::is_ok));
    }
}
