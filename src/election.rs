//! `Election`: one leader of a name at a time, whom everyone can see and
//! follow. `Leadership`, a leader's hold; `Observer`, the changes in order.

use std::fmt;
use std::time::Duration;

use crate::config::validate_wait;
use crate::guard::Guard;
use crate::info::Leader;
use crate::lease::state::LeaseState;
use crate::locker::Locker;
use crate::protocol::keys::LockKeys;
use crate::Error;

/// A leader election over this locker's server and prefix, made by
/// [`Locker::election`]: at most one leader of its name at a time, on
/// every host, with a value everyone can read (its address, say) and a
/// term that rises with every new leader (its fencing token).
///
/// A leader is a long-held lock with two things a lock lacks: everyone can
/// see and follow who leads ([`leader`](Election::leader),
/// [`observe`](Election::observe)), and its term is the epoch that the
/// resources it drives check. Candidates wait their turn first come, first
/// served, as [`Locker::lock`] does; a leader that resigns hands over to
/// the next candidate at once, and one that dies (killed, its host gone)
/// is replaced when its lease runs out (the locker's TTL, 30 s by default),
/// plus at most a dead waiter's stay when the first candidate queued died
/// too, and plus the locker's [`lock_delay`](crate::Builder::lock_delay)
/// if it has one: a leader that vanished without resigning may only be
/// paused (GC, swap, a suspended VM), and act as leader when it wakes; the
/// delay lets what it writes then land before its successor leads.
///
/// An operator sees the leader in [`Locker::locks`] (kind
/// [`LockKind::Leader`](crate::LockKind::Leader), named
/// `__redmutex__:election:<name>`) and can break a stuck one with
/// [`Locker::break_lock`]: the lead passes as after a resignation (observers
/// are told at once), and the broken leader is told at its next renewal,
/// as a lock's holder is.
///
/// A cheap handle (a clone of the locker and the name), `Clone + Send +
/// Sync`. Works on one server, Sentinel and a Cluster (where a candidate
/// waiting learns of a resignation at its next attempt, as a lock's
/// waiter does there); not on Redlock.
///
/// # What a leader may believe
///
/// A [`Leadership`] is a [`Guard`] on the election's key, with the whole
/// lease API: it leads while its lease lasts, renewed by its watchdog, and
/// [`Leadership::is_lost`] says the moment that can no longer be promised.
/// Two candidates can both *believe* they lead only as two holders of a
/// lock can (a leader paused past its lease, a failover that loses the key:
/// see the crate docs' "Guarantees and limits"); the term is the answer,
/// as the fencing token is for a lock: a resource that refuses terms below
/// the highest it has seen is never driven by an old leader.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let election = locker.election("scheduler")?;
/// let leadership = election.campaign("10.0.0.7:8080")?; // waits its turn
/// println!("leading in term {}", leadership.term());
/// while !leadership.is_lost() {
///     // ... schedule, passing leadership.term() to what checks it ...
/// #   break;
/// }
/// leadership.resign()?; // the next candidate leads at once
/// # Ok::<(), redmutex::Error>(())
/// ```
#[derive(Clone)]
pub struct Election {
    locker: Locker,
    name: String,
    keys: LockKeys,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Election {
    /// Checks the name and the topology; nothing is sent to Redis.
    pub(crate) fn new(locker: Locker, name: &str) -> Result<Election, Error> {
        locker.shared().check_election(name)?;
        let keys = locker.shared().election_keys(name);
        Ok(Election {
            locker,
            name: name.to_owned(),
            keys,
        })
    }

    /// The election's name.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// assert_eq!(locker.election("scheduler")?.name(), "scheduler");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Blocks until this candidate leads, with `value` as the leader's
    /// value, or until the builder's `acquire_timeout` passes (by default
    /// it never does). Candidates queue first come, first served, as
    /// [`Locker::lock`]'s waiters do. The new leader is logged for
    /// observers before this returns.
    ///
    /// # Errors
    ///
    /// As [`Locker::lock`]: [`Error::Timeout`], [`Error::Redis`],
    /// [`Error::Pool`], [`Error::Thread`]; [`Error::InvalidInput`] for a
    /// value above 64 KiB; [`Error::Lost`] when the leadership was lost
    /// before it could be logged (a lease shorter than a round trip).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let leadership = locker.election("scheduler")?.campaign("10.0.0.7:8080")?;
    /// # drop(leadership);
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "this candidate leads only while the leadership lives: dropping it resigns"]
    pub fn campaign(&self, value: impl AsRef<str>) -> Result<Leadership, Error> {
        let wait = self.locker.shared().config.acquire_timeout;
        self.campaign_within(value.as_ref(), wait)
    }

    /// Like [`campaign`](Election::campaign), but waits at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Election::campaign); [`Error::InvalidInput`] as well
    /// when `wait` is above [`MAX_TTL`](crate::MAX_TTL).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let election = locker.election("scheduler")?;
    /// match election.campaign_timeout("10.0.0.7:8080", Duration::from_secs(5)) {
    ///     Ok(_leadership) => println!("leading"),
    ///     Err(e) if e.is_timeout() => println!("someone else leads"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "this candidate leads only while the leadership lives: dropping it resigns"]
    pub fn campaign_timeout(
        &self,
        value: impl AsRef<str>,
        wait: Duration,
    ) -> Result<Leadership, Error> {
        validate_wait("wait", wait)?;
        self.campaign_within(value.as_ref(), Some(wait))
    }

    /// One attempt: the leadership if nobody leads now and no candidate is
    /// queued first, else `None`. Never waits.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Election::campaign), without [`Error::Timeout`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// if let Some(leadership) = locker.election("scheduler")?.try_campaign("10.0.0.7:8080")? {
    ///     println!("leading in term {}", leadership.term());
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    #[must_use = "this candidate leads only while the leadership lives: dropping it resigns"]
    pub fn try_campaign(&self, value: impl AsRef<str>) -> Result<Option<Leadership>, Error> {
        let a = self
            .locker
            .shared()
            .prepare_candidate(&self.name, value.as_ref())?;
        match self.locker.try_acquisition(a)? {
            Some(guard) => self.announced(guard).map(Some),
            None => Ok(None),
        }
    }

    /// Campaigns for `value` (waiting as [`campaign`](Election::campaign)
    /// does), runs `f` while this candidate leads, and resigns when `f`
    /// returns, handing over to the next candidate at once; returns what
    /// `f` returned. It campaigns once: to stand again after a term, call
    /// it in a loop. In the spirit of client-go's `OnStartedLeading`, `f`
    /// is handed the [`Leadership`] to watch: it should stop its work when
    /// [`Leadership::is_lost`] turns true (or
    /// [`wait_lost`](Leadership::wait_lost) returns), since the lease may
    /// be lost while it runs. A resignation that fails is logged (target
    /// `redmutex::release`; the key then waits out its lease) and does not
    /// fail the call.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Election::campaign), before `f` runs.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let election = locker.election("scheduler")?;
    /// loop {
    ///     election.lead("10.0.0.7:8080", |leadership| {
    ///         while !leadership.wait_lost(Duration::from_secs(1)) {
    ///             // ... a round of scheduling under leadership.term() ...
    ///         }
    ///     })?;
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn lead<R>(
        &self,
        value: impl AsRef<str>,
        f: impl FnOnce(&Leadership) -> R,
    ) -> Result<R, Error> {
        let leadership = self.campaign(value)?;
        let result = f(&leadership);
        match leadership.resign() {
            Ok(()) | Err(Error::Lost { .. }) => {}
            Err(e) => log::warn!(
                target: "redmutex::release",
                "election {:?}: resigning failed, the lead waits out its lease: {e}",
                self.name
            ),
        }
        Ok(result)
    }

    /// Who leads right now, or `None`. One round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] and [`Error::Pool`] when Redis fails or cannot be
    /// reached.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// match locker.election("scheduler")?.leader()? {
    ///     Some(leader) => println!("{} leads, term {}", leader.value(), leader.term()),
    ///     None => println!("no leader"),
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn leader(&self) -> Result<Option<Leader>, Error> {
        Ok(self.locker.shared().observe(&self.keys, None)?.leader)
    }

    /// Follows the election: an [`Observer`], a blocking iterator that
    /// yields who leads now (a [`Leader`], or `None`), then each change in
    /// order. One round trip here, to read the state it yields first.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] and [`Error::Pool`] when Redis fails or cannot be
    /// reached.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// for change in locker.election("scheduler")?.observe()? {
    ///     match change? {
    ///         Some(leader) => println!("now {} (term {})", leader.value(), leader.term()),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn observe(&self) -> Result<Observer, Error> {
        Observer::new(self.clone())
    }

    fn campaign_within(&self, value: &str, wait: Option<Duration>) -> Result<Leadership, Error> {
        let a = self.locker.shared().prepare_candidate(&self.name, value)?;
        let guard = self.locker.wait_for(a, wait, None)?;
        self.announced(guard)
    }

    /// The leadership of `guard`, once its leader is logged for observers
    /// (a guard lost before that is dropped, and `Lost` returned).
    fn announced(&self, guard: Guard) -> Result<Leadership, Error> {
        let lost = || Error::Lost {
            key: self.name.clone(),
        };
        let (shared, a) = guard.held_parts().ok_or_else(lost)?;
        if shared.announce(a)? {
            Ok(Leadership {
                guard,
                name: self.name.clone(),
            })
        } else {
            Err(lost())
        }
    }
}

/// The lead of an election, held: a [`Guard`] on the election's key (see
/// [`guard`](Leadership::guard) for the whole lease API), renewed by its
/// watchdog. Made by [`Election::campaign`] and its kin.
///
/// Dropping it resigns, as [`resign`](Leadership::resign) does, errors
/// logged (as a guard's drop releases). One never dropped
/// (`std::mem::forget`) leads for as long as its process lives, renewed
/// by its watchdog, unless the locker has a
/// [`max_hold`](crate::Builder::max_hold) (see the [`Guard`] docs'
/// "Resource leaking"). `Send` and `Sync`: it may be moved to, or shared
/// with, the thread that does the leader's work.
///
/// ```no_run
/// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
/// let leadership = locker.election("scheduler")?.campaign("10.0.0.7:8080")?;
/// leadership.proclaim("10.0.0.7:9090")?; // moved: observers are told
/// leadership.resign()?;
/// # Ok::<(), redmutex::Error>(())
/// ```
#[must_use = "this candidate leads only while the leadership lives: dropping it resigns"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct Leadership {
    guard: Guard,
    name: String,
}

impl Leadership {
    /// The term of this leadership: its fencing token, above every earlier
    /// leader's of the election (as a lock's fencing token rises).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let leadership = locker.election("scheduler")?.campaign("a")?;
    /// println!("term {}", leadership.term());
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// The election's name.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let leadership = locker.election("scheduler")?.campaign("a")?;
    /// assert_eq!(leadership.name(), "scheduler");
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The state of the leadership's lease, as [`Guard::state`]: held,
    /// in doubt (a renewal failed or is overdue: a cautious leader pauses
    /// what it drives), or lost (final).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use redmutex::LeaseState;
    /// let leadership = locker.election("scheduler")?.campaign("a")?;
    /// if leadership.state() == LeaseState::Held {
    ///     // ... drive the cluster ...
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn state(&self) -> LeaseState {
        self.guard.state()
    }

    /// Blocks until the leadership's lease state differs from `seen`, or
    /// `timeout` passes, and returns it, as [`Guard::wait_state_change`].
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use redmutex::LeaseState;
    /// use std::time::Duration;
    /// let leadership = locker.election("scheduler")?.campaign("a")?;
    /// let mut state = leadership.state();
    /// while state != LeaseState::Lost {
    ///     state = leadership.wait_state_change(state, Duration::from_secs(60));
    ///     println!("leadership {state:?}");
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn wait_state_change(&self, seen: LeaseState, timeout: Duration) -> LeaseState {
        self.guard.wait_state_change(seen, timeout)
    }

    /// Whether the leadership is lost: as [`Guard::is_lost`], final.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let leadership = locker.election("scheduler")?.campaign("a")?;
    /// if leadership.is_lost() {
    ///     println!("stop leading");
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Blocks until the leadership is lost or `timeout` passes, as
    /// [`Guard::wait_lost`]: true when lost.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let leadership = locker.election("scheduler")?.campaign("a")?;
    /// while !leadership.wait_lost(Duration::from_secs(1)) {
    ///     // ... lead ...
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.guard.wait_lost(timeout)
    }

    /// The guard on the election's key, for the rest of the lease API
    /// ([`Guard::ensure_held`], [`Guard::valid_until`], ...).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let leadership = locker.election("scheduler")?.campaign("a")?;
    /// leadership.guard().ensure_held()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// Sets the leader's value to `value`, and tells observers. One round
    /// trip, owner-checked in Redis: a leader that lost its lease changes
    /// nothing (one more round trip then reads whether an operator broke
    /// the leadership, to tell the loss as a break).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the leadership is lost (nothing was changed;
    /// when it is Redis that showed the key gone or someone else's, the
    /// leadership is lost from then on, as [`state`](Leadership::state)
    /// says at once);
    /// [`Error::InvalidInput`] for a value above 64 KiB;
    /// [`Error::NotReplicated`] with
    /// [`Builder::min_replicas`](crate::Builder::min_replicas) when too few
    /// replicas acknowledged it (the value is set on the master);
    /// [`Error::Redis`] and [`Error::Pool`] when Redis fails or cannot be
    /// reached.
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let leadership = locker.election("scheduler")?.campaign("starting")?;
    /// // ... bind the listener ...
    /// leadership.proclaim("10.0.0.7:8080")?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn proclaim(&self, value: impl AsRef<str>) -> Result<(), Error> {
        let lost = || Error::Lost {
            key: self.name.clone(),
        };
        if self.guard.is_lost() {
            return Err(lost());
        }
        let (shared, a) = self.guard.held_parts().ok_or_else(lost)?;
        if shared.proclaim(a, value.as_ref())? {
            Ok(())
        } else {
            // Redis said the lead is someone else's: the leadership is
            // lost now, not at its next renewal.
            self.guard.note_lost();
            Err(lost())
        }
    }

    /// Resigns: stops the watchdog, gives up the lead and hands it to the
    /// first candidate queued at once (or leaves the election without a
    /// leader), and tells observers. As [`Guard::unlock`].
    ///
    /// # Errors
    ///
    /// As [`Guard::unlock`]: [`Error::Lost`] when the leadership had been
    /// lost at some point; [`Error::Redis`], [`Error::Pool`] when Redis
    /// fails (the lead then waits out its lease).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let leadership = locker.election("scheduler")?.campaign("a")?;
    /// leadership.resign()?;
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn resign(self) -> Result<(), Error> {
        self.guard.unlock()
    }

    /// Resigns in favour of the candidate queued with `value`: it leads at
    /// once (`true`), ahead of the candidates queued before it, who keep
    /// their order; when no live candidate campaigned with `value`, the lead
    /// goes to the first candidate queued, as [`resign`](Leadership::resign)
    /// hands it over (`false`). Of several candidates with that value, the
    /// first queued. Observers see the change as after a resignation: this
    /// leader, then the next, in order, with no "no leader" between them.
    /// For a rolling deploy: the old version hands the lead to the new one
    /// (which campaigns with a value that names it) rather than to whoever
    /// queued first, or by expiry. Two round trips: the candidate moved to
    /// the head of the queue (owner-checked: only the leader may), then the
    /// resignation.
    ///
    /// # Errors
    ///
    /// As [`resign`](Leadership::resign): [`Error::Lost`] when the
    /// leadership had been lost (nobody is moved); [`Error::Redis`],
    /// [`Error::Pool`] when Redis fails (the leadership is then dropped,
    /// which resigns, errors logged); [`Error::InvalidInput`] for a value
    /// above 64 KiB (nothing is done: the leadership is dropped, and so
    /// resigns as `resign` would).
    ///
    /// ```no_run
    /// # let locker = redmutex::Locker::open("redis://127.0.0.1/")?;
    /// let leadership = locker.election("scheduler")?.campaign("v1:10.0.0.7")?;
    /// // ... the new version, "v2:10.0.0.9", has started and campaigns ...
    /// if !leadership.hand_over_to("v2:10.0.0.9")? {
    ///     println!("v2 was not queued: the next candidate leads");
    /// }
    /// # Ok::<(), redmutex::Error>(())
    /// ```
    pub fn hand_over_to(self, value: impl AsRef<str>) -> Result<bool, Error> {
        let found = match self.guard.held_parts() {
            Some((shared, a)) if !self.guard.is_lost() => shared.prefer(a, value.as_ref())?,
            _ => None,
        };
        if found.is_none() {
            // Redis said the lead is someone else's: lost now, as `proclaim`.
            self.guard.note_lost();
        }
        self.guard.unlock()?;
        Ok(found.unwrap_or(false))
    }
}

mod observer;

pub use observer::Observer;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn election_is_clone_send_sync_and_leadership_and_observer_are_send() {
        fn shared<T: Clone + Send + Sync>() {}
        fn sent<T: Send>() {}
        shared::<Election>();
        sent::<Leadership>();
        sent::<Observer>();
    }
}
