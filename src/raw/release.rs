//! The release of a granted hold, whatever its primitive: its keys deleted
//! where still ours on every instance (the script announces the release and
//! hands the lock over), and this locker's waiters woken.

use std::sync::Arc;

use redis::Value;

use crate::protocol::replies::{self, Handed};
use crate::protocol::scripts;
use crate::quorum::{self, Released};
use crate::Error;

use super::{Acquisition, Queue, RawLock};

impl RawLock {
    /// Releases on every instance, ignoring the outcome (clean-up paths).
    /// Never sent again later: the acquisition may try again with the same
    /// token.
    pub(super) fn release_quietly(self: &Arc<Self>, a: &Arc<Acquisition>) {
        let _ = self.release_everywhere(a);
    }

    /// Deletes the keys still owned by `a` on every instance, announces the
    /// release, and hands a single-key lock to the first live waiter in its
    /// queue. `Ok(true)`: a majority still had the lock; `Ok(false)`: it had
    /// been lost. With the hand-over, if there was one.
    ///
    /// A guard's release, the end of `a`'s token: with several instances,
    /// one that could not be reached, or refused it for a moment (`BUSY`,
    /// `LOADING`, `NOREPLICAS`, `READONLY`...), is sent it again once it
    /// answers, and
    /// one where a renewal or the write-back may still arrive is sent it
    /// again for a while (see `later.rs`), so that the key left (or put
    /// back) there does not block every later grant for a TTL.
    pub(crate) fn release(
        self: &Arc<Self>,
        a: &Arc<Acquisition>,
    ) -> Result<(bool, Option<Handed>), Error> {
        let (answers, handed) = self.release_everywhere(a);
        if self.instances.len() > 1 {
            for (i, answer) in answers.iter().enumerate() {
                let failed = matches!(answer, Err(e) if quorum::unanswered(e));
                if failed || a.stalled_on(i) {
                    self.release_later(i, a, a.stalled_on(i));
                }
            }
        }
        let answers = answers
            .into_iter()
            .map(|answer| answer.map(|deleted| deleted == a.keys.locks.len()))
            .collect();
        match quorum::decide_release(answers) {
            Released::Clean => Ok((true, handed)),
            Released::Lost => Ok((false, handed)),
            Released::Unknown { ours, last } => Err(self.quorum_error(ours, last)),
        }
    }

    /// The release script of `a` on every instance: per instance, how many
    /// keys it deleted; with the hand-over, if there was one.
    fn release_everywhere(
        self: &Arc<Self>,
        a: &Arc<Acquisition>,
    ) -> (Vec<Result<usize, Error>>, Option<Handed>) {
        // (A read-write lock's releases always look at its queue.)
        let channel = self.channel_for(&a.keys);
        let queued = channel.is_some() && self.queue_mode(a, Queue::Respect) != Queue::Ignore;
        let channel = channel.as_deref().unwrap_or("");
        let unmark = !self.lock_delay(&a.keys).is_zero();
        let call = scripts::release(&a.keys, a.owner().as_str(), channel, queued, unmark);
        let read = |reply: Value| replies::parse_release(&reply);
        let answers = match self.ask_everywhere(&call, None, read) {
            Some(answers) => answers,
            None => {
                let (this, call) = (Arc::clone(self), Arc::new(call));
                self.fan.run(self.instances.len(), move |i| {
                    read(this.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?)
                })
            }
        };
        let mut handed = None;
        let answers = answers
            .into_iter()
            .map(|answer| {
                let (deleted, to) = answer?;
                if to.is_some() {
                    handed = to;
                }
                Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
            })
            .collect();
        (answers, handed)
    }

    /// Wakes this locker's waiters after a release of `a` here: the one the
    /// lock was handed over to, or else those of its keys.
    pub(crate) fn notify_released(&self, a: &Acquisition, handed: Option<&Handed>) {
        match handed {
            Some((token, fence)) => self.wake.waiters().hand_over(token, *fence),
            None => {
                for k in a.keys.watched().iter() {
                    self.wake.waiters().notify(k);
                }
            }
        }
    }
}
