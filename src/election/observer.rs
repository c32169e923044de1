//! `Observer`: an election's changes followed, in order, from its log.

use std::collections::VecDeque;
use std::fmt;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use crate::backoff::jitter_seed;
use crate::defaults::{MAX_TTL, OBSERVE_BLOCK};
use crate::info::Leader;
use crate::protocol::replies::{Logged, Observed};
use crate::Error;

use super::Election;

/// Follows an election, made by [`Election::observe`]: a blocking
/// iterator that yields who leads when it was made (a [`Leader`], or
/// `None`), then each change in order: a new leader, a new value
/// proclaimed, no leader. It never ends by itself; an error is yielded
/// and the next call goes on from where it was, after a pause of the
/// locker's [`Backoff`](crate::Backoff).
///
/// Each change is logged by the script that makes it (a leader is logged
/// before it is told it leads), and the observer reads the log with a
/// blocking `XREAD`: it wakes when the change is made, and otherwise when
/// the leader's lease would run out (a lease that runs out has no script:
/// the observer then reads the election's key, and the next leader's
/// announcement logs it too), or every 10 s. Each wait holds a pooled
/// connection of the locker.
///
/// # What "every change, in order" means
///
/// The changes are: a new leader (a new term), a new value proclaimed by
/// the leader, and "no leader" (it resigned with no candidate queued, an
/// operator broke it with none queued, or its lease ran out or was lost). A resignation that hands the lead to a
/// queued candidate is no change of its own: the next leader follows it
/// directly. Every observer yields the same changes in the same order,
/// each once, never a term below one it already yielded, and every value
/// a leader proclaimed, even twice between two reads. A lease that runs
/// out has no script: an observer waiting then reads the election's key
/// when the lease would end and yields "no leader", and the next leader's
/// announcement logs it too, before itself, for the observers that read
/// the log later. A leader is yielded once it is logged, which is before
/// its candidate is told it leads. Two limits:
///
/// - The log keeps the latest 128 changes (and is deleted a day after the
///   last): an observer more than 128 changes behind (it did not call
///   `next` while they were made) skips the oldest it had not read, goes
///   on from the oldest still kept, and logs a `warn` (target
///   `redmutex::observe`).
/// - The first state yielded is read from the election's key, not the log:
///   made just as a candidate handed the lead has it but has not taken it
///   up, an observer yields that candidate, then the same candidate again
///   with the term its take-up mints. A candidate handed the lead that dies
///   before taking it up (its claim runs out within its stay, seconds) is
///   never yielded: "no leader" follows the leader that resigned.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let mut observer = locker.election("scheduler")?.observe()?;
/// let now = observer.next(); // the leader now, at once
/// # let _ = now;
/// for change in observer {
///     println!("{:?}", change?.map(|l| l.value().to_owned()));
/// }
/// # Ok::<(), redmutex::Error>(())
/// ```
pub struct Observer {
    election: Election,
    /// The id of the last log entry read.
    after: String,
    /// The last state yielded (or queued to be).
    last: Option<Leader>,
    /// The highest term yielded.
    top: u64,
    /// When the current leader's lease runs out unless renewed.
    ends: Option<Instant>,
    /// The latest entry read is a hand-over: the lead passes to a
    /// candidate without a gap, and is logged when taken up.
    handing: bool,
    pending: VecDeque<Option<Leader>>,
    /// Errors in a row: the next read waits a backoff pause first.
    failures: u32,
    /// A channel nothing is sent on, for those pauses.
    pause: (Sender<()>, Receiver<()>),
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("election", &self.election.name)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl Iterator for Observer {
    type Item = Result<Option<Leader>, Error>;

    /// Blocks until the next change, and yields it.
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Some(Ok(change));
            }
            if self.failures > 0 {
                // After an error, a backoff pause before the next read, so a
                // server that is down is not called in a tight loop.
                let backoff = self.election.locker.shared().config.backoff;
                let pause = backoff.delay(self.failures - 1, jitter_seed()).min(MAX_TTL);
                let _ = self.pause.1.recv_timeout(pause);
            }
            match self.step() {
                Ok(()) => self.failures = 0,
                Err(e) => {
                    self.failures = self.failures.saturating_add(1);
                    return Some(Err(e));
                }
            }
        }
    }
}

impl Observer {
    /// An observer of `election`, which yields the state read now first.
    pub(super) fn new(election: Election) -> Result<Observer, Error> {
        let seen = election.locker.shared().observe(&election.keys, None)?;
        let mut observer = Observer {
            election,
            after: seen.latest.clone(),
            last: None,
            top: 0,
            ends: None,
            handing: false,
            pending: VecDeque::from([seen.leader.clone()]),
            failures: 0,
            pause: mpsc::channel(),
        };
        observer.take_current(&seen);
        if let Some(leader) = seen.leader {
            observer.top = leader.term;
            observer.last = Some(leader);
        }
        Ok(observer)
    }

    /// Waits for the log (or the leader's lease to run out), then reads
    /// what changed.
    fn step(&mut self) -> Result<(), Error> {
        let now = Instant::now();
        let block = self
            .ends
            .map_or(OBSERVE_BLOCK, |t| {
                t.saturating_duration_since(now) + Duration::from_millis(1)
            })
            .clamp(Duration::from_millis(5), OBSERVE_BLOCK);
        let shared = self.election.locker.shared();
        shared.wait_log(&self.election.keys, &self.after, block)?;
        let seen = shared.observe(&self.election.keys, Some(&self.after))?;
        if seen.behind {
            log::warn!(
                target: "redmutex::observe",
                "election {:?}: this observer fell behind the log's last 128 changes, \
                 some may be skipped",
                self.election.name
            );
        }
        for (id, change) in &seen.entries {
            match change {
                Logged::Leader(l) => {
                    // The same leader now: yielded with its time left.
                    let l = seen.leader.as_ref().filter(|c| *c == l).unwrap_or(l);
                    self.offer(l);
                    self.handing = false;
                }
                Logged::Ended(term) => {
                    self.offer_none(*term);
                    self.handing = false;
                }
                Logged::Handed => self.handing = true,
            }
            self.after.clone_from(id);
        }
        // The leader now, after every entry read: a lease that ran out has
        // no entry; a leader not logged yet is yielded when it is (it is
        // told it leads only then), but the leader before it has gone.
        match &seen.leader {
            Some(now) if now.term > self.top => {
                if !self.handing {
                    self.offer_none(now.term);
                }
            }
            Some(_) => {}
            None => self.offer_none(u64::MAX),
        }
        self.take_current(&seen);
        Ok(())
    }

    /// When the leader now would lose its lease, to bound the next wait.
    fn take_current(&mut self, seen: &Observed) {
        self.ends = seen
            .leader
            .as_ref()
            .and_then(|l| Instant::now().checked_add(l.ttl));
    }

    /// Queues `l` when it is news: a later term, or a new value.
    fn offer(&mut self, l: &Leader) {
        let new_value = self
            .last
            .as_ref()
            .is_some_and(|last| last.term == l.term && last.value != l.value);
        if l.term > self.top || new_value {
            self.top = self.top.max(l.term);
            self.last = Some(l.clone());
            self.pending.push_back(Some(l.clone()));
        }
    }

    /// Queues "no leader" when the leader last yielded is the one whose
    /// leadership ended, or an earlier one (its term below `ended`, or
    /// equal).
    fn offer_none(&mut self, ended: u64) {
        if self.last.as_ref().is_some_and(|last| last.term <= ended) {
            self.last = None;
            self.pending.push_back(None);
        }
    }
}
