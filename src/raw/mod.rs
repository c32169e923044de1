//! The mechanism under `Locker` and `Guard`, for one instance or a
//! Redlock quorum: each operation runs its script (through the typed
//! callers of `protocol::scripts`) on every instance, in parallel when
//! there are several, parses the replies (`protocol::replies`), and a pure
//! function of `quorum.rs` decides.
//!
//! This file holds what every primitive shares: the [`RawLock`] type,
//! running a call on an instance, the quorum's error, and the acquisition
//! (its state and the acquire attempt). One file per primitive holds what
//! is its own: `mutex.rs` (a lock's keys, its holder), `permits.rs` (a
//! semaphore's permits), `rw.rs` (a read-write lock's holds); what a
//! granted hold does is in `renew.rs` and `release.rs` (with the release's
//! announcement to this locker's waiters), and what a waiter makes of a
//! lock handed over to it in `handed.rs`; `redlock.rs` holds the
//! Redlock-only parts (the fan-out, each master's breaker, the
//! proposal and the write-back), and `later.rs` the releases sent again;
//! `audit.rs` writes the audit trail's events on a thread of its own;
//! `held.rs` files the holds of this locker's guards by thread.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionLike, Value};

use crate::config::Config;
use crate::conn::{Connector, Op};
use crate::protocol::keys::{Hold, LockKeys};
use crate::protocol::replies;
use crate::protocol::scripts;
pub(crate) use crate::protocol::scripts::Queue;
use crate::protocol::slots;
use crate::quorum::{self, Acquired, Grant};
use crate::server;
use crate::stats::recorder::{Kind, Kinded, Recorder};
use crate::time;
use crate::token::Token;
use crate::wake::listener::Listener;
use crate::wake::waiters::Signal;
use crate::Error;

use redlock::{proposal_lead_and_bound, Breaker, FanOut};

/// State shared by a locker's clones, its guards and their watchdogs.
pub(crate) struct RawLock {
    instances: Vec<Arc<dyn Connector>>,
    /// Per instance, with several (Redlock): when it may be asked again
    /// after its connection failed (see [`Breaker`]).
    breakers: Vec<Breaker>,
    /// Per instance: its server's version was found supported (see
    /// [`server::check_version`]), checked before the first acquisition.
    version_checked: Vec<AtomicBool>,
    pub(crate) config: Config,
    /// The release listener, and the waiters it wakes.
    wake: Arc<Listener>,
    /// Redlock: the threads that ask the other instances.
    fan: FanOut,
    /// Redlock: the releases that could not reach an instance, sent again
    /// once it answers (and for a while where a late renewal may undo them).
    later: later::Later,
    /// The live figures (`Locker::stats`), shared by clones and guards.
    pub(crate) stats: Recorder,
    /// The audit trail's events waiting to be written (see `audit.rs`).
    trail: audit::Trail,
    /// The holds of this locker's guards in this process, by thread (see
    /// `held.rs`).
    registry: held::Registry,
}

// `RawLock` is `Send + Sync`: connectors are required to be, and `Config` and
// `Signal` hold plain data behind locks. So `Locker` and `Guard` are too.

/// One acquisition: its token (kept across retries, so a retry after a lost
/// reply finds the key already ours; in Redlock, where a failed attempt is
/// released everywhere, each attempt's keys carry an owner token of their
/// own, see [`Acquisition::owner`]) and its keys.
pub(crate) struct Acquisition {
    /// Its own token: the name its waiter is known by, and with one
    /// instance the owner token of its keys.
    pub(crate) token: Token,
    /// The owner token its keys carry (see [`Acquisition::owner`]).
    owner: Mutex<Token>,
    /// The keys as the caller gave them, shared with its guard.
    pub(crate) caller_keys: Arc<[String]>,
    /// Its keys in Redis.
    pub(crate) keys: LockKeys,
    /// The metadata its keys carry instead of the locker's (an election
    /// candidate's value).
    pub(crate) metadata: Option<String>,
    /// The value its leader proclaimed last (see `election.rs`), which its
    /// key carries since: its audit events' metadata.
    pub(crate) proclaimed: Mutex<Option<String>>,
    /// The fencing counter as the latest refused attempt saw it: a lock
    /// handed over to this acquisition with a token at or below it was
    /// handed over before that attempt, and lost since.
    floor: AtomicU64,
    /// The index of the permit granted, once one is.
    slot: AtomicUsize,
    /// Redlock: the masters (a bit each) where a call that puts our keys
    /// there (a renewal, which repairs a missing key, or the write-back)
    /// failed for want of a connection: it may still arrive, after the
    /// release too, so the release is sent there again later.
    stalled: AtomicU64,
    /// Redlock: the longest TTL (ms) a renewal of its keys asked for (an
    /// `extend` beyond the locker's TTL): a release that missed a master
    /// is sent there again for as long as the key left there can live.
    longest_ttl: AtomicU64,
    /// Its guard's loss was counted in the stats (once per guard).
    pub(crate) loss_counted: AtomicBool,
}

/// No permit granted yet.
const NO_SLOT: usize = usize::MAX;

impl Acquisition {
    /// An acquisition of `keys` (what they hold says how) with a fresh
    /// token.
    fn new(caller_keys: Arc<[String]>, keys: LockKeys) -> Result<Acquisition, Error> {
        let token = Token::new()?;
        Ok(Acquisition {
            owner: Mutex::new(token.clone()),
            token,
            caller_keys,
            keys,
            metadata: None,
            proclaimed: Mutex::new(None),
            floor: AtomicU64::new(0),
            slot: AtomicUsize::new(NO_SLOT),
            stalled: AtomicU64::new(0),
            longest_ttl: AtomicU64::new(0),
            loss_counted: AtomicBool::new(false),
        })
    }

    /// The owner token its keys carry: its own token with one instance. In
    /// Redlock each attempt draws a fresh one (see [`RawLock::acquire`]),
    /// so that an attempt's clean-up, which may reach a master late (queued
    /// behind a stalled acquire, see [`RawLock::acquire_on`]), can never
    /// delete the keys of a later attempt; the guard goes on with the one
    /// of the attempt that was granted.
    pub(crate) fn owner(&self) -> Token {
        self.owner.lock().clone()
    }
}

/// What the stats (and the metrics' `kind` label) count an acquisition's
/// events as.
impl Kinded for Acquisition {
    fn kind(&self) -> Kind {
        match self.keys.hold {
            // A permit's granted acquisition holds one key, as a lock.
            Hold::Lock if self.slot.load(Ordering::Relaxed) != NO_SLOT => Kind::Permit,
            Hold::Lock => Kind::Lock,
            Hold::Permit => Kind::Permit,
            Hold::Read { .. } => Kind::Read,
            Hold::Write { .. } => Kind::Write,
            Hold::Leader { .. } => Kind::Leader,
        }
    }
}

/// The outcome of one acquire attempt over all instances.
pub(crate) enum Outcome {
    Granted {
        /// When the first request was sent: the lease counts from here.
        sent: Instant,
        fence: u64,
    },
    Busy {
        /// How long the busy key's lease has left, when it has a TTL.
        holder_ttl: Option<Duration>,
        /// How long a lock-delay has left, when one keeps the keys: come
        /// back then.
        delay: Option<Duration>,
        /// When the attempt was sent: a lock handed over to this acquisition
        /// afterwards counts its lease from here.
        sent: Instant,
    },
}

/// With [`Builder::min_replicas`](crate::Builder::min_replicas): waits
/// (`WAIT`, on the connection that wrote) until that many replicas have
/// what was written, within the replica timeout.
fn acknowledged(config: &Config, c: &mut dyn ConnectionLike) -> Result<(), Error> {
    if config.min_replicas == 0 {
        return Ok(());
    }
    let acked = match redis::cmd("WAIT")
        .arg(config.min_replicas)
        .arg(time::millis_ceil(config.replica_timeout))
        .query::<u64>(c)
    {
        Ok(acked) => acked,
        // The server answered, with a refusal: `WAIT` unknown, renamed
        // away, or denied by an ACL, as on managed services. (Not a
        // refusal for a moment, a busy server's: that is no answer.)
        Err(e) if e.code().is_some() && !e.is_io_error() && !quorum::refused_for_a_moment(&e) => {
            return Err(Error::Unsupported {
                reason: format!(
                    "the server refuses WAIT ({}), which min_replicas needs: build the \
                     locker without min_replicas on this server",
                    e.code().unwrap_or("an error")
                ),
            })
        }
        Err(e) => return Err(e.into()),
    };
    if acked >= config.min_replicas {
        Ok(())
    } else {
        Err(Error::NotReplicated {
            acked,
            needed: config.min_replicas,
        })
    }
}

impl RawLock {
    /// The lock-delay of a hold of `keys` (see `Builder::lock_delay`): the
    /// locker's, for every kind of hold. An election's leadership too: a
    /// leader that vanished without resigning may be paused, and still act
    /// as leader when it wakes; its resignation is a clean release.
    pub(crate) fn lock_delay(&self, _keys: &LockKeys) -> Duration {
        self.config.lock_delay
    }

    pub(crate) fn new(instances: Vec<Arc<dyn Connector>>, config: Config) -> Self {
        let single = config.topology.announces() && !config.topology.shards();
        let channel = single.then(|| config.keys.release_channel());
        let wake = Arc::new(Listener::new(channel, config.topology.shards()));
        RawLock {
            version_checked: instances.iter().map(|_| AtomicBool::new(false)).collect(),
            breakers: instances.iter().map(|_| Breaker::default()).collect(),
            fan: FanOut::new(instances.len()),
            later: later::Later::new(instances.len()),
            stats: Recorder::new(config.stats, config.keys.prefix()),
            trail: audit::Trail::default(),
            registry: held::Registry::default(),
            instances,
            config,
            wake,
        }
    }

    /// Makes sure this locker listens for releases (see
    /// [`Listener::ensure`]). True when the listener has just come up: the
    /// caller should try again at once, as a release may have slipped by.
    pub(crate) fn ensure_listening(&self, a: &Acquisition) -> bool {
        let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
        match self.shard_of(&a.keys) {
            Some(slot) => {
                let channel = self.config.keys.shard_release_channel(slot);
                self.wake
                    .ensure_shard(self.instances.first(), &channel, slot, checkout, io)
            }
            None => self.wake.ensure(self.instances.first(), checkout, io),
        }
    }

    /// On a cluster that announces releases with sharded pub/sub, the slot
    /// of `keys` (all of a script's keys share it).
    fn shard_of(&self, keys: &LockKeys) -> Option<u16> {
        if !self.config.topology.shards() {
            return None;
        }
        keys.locks.first().map(|k| slots::slot(k))
    }

    /// The channel the release and dequeue scripts of `keys` announce on:
    /// the locker's release channel, or on a cluster the shard channel of
    /// the keys' slot; `None` when releases are not announced.
    pub(crate) fn channel_for(&self, keys: &LockKeys) -> Option<Cow<'_, str>> {
        match self.shard_of(keys) {
            Some(slot) => Some(Cow::Owned(self.config.keys.shard_release_channel(slot))),
            None => self.wake.channel().map(Cow::Borrowed),
        }
    }

    pub(crate) fn instances(&self) -> &[Arc<dyn Connector>] {
        &self.instances
    }

    pub(crate) fn signal(&self) -> &Signal {
        self.wake.waiters()
    }

    /// The queue mode for an attempt of `a` that wants `wanted`: queues are
    /// kept for single-key locks, and not in Redlock mode.
    pub(crate) fn queue_mode(&self, a: &Acquisition, wanted: Queue) -> Queue {
        // A semaphore queues for one permit, whichever it is; a read-write
        // lock queues for one lock.
        let keys = match a.keys.hold {
            Hold::Lock => a.keys.locks.len(),
            Hold::Permit | Hold::Read { .. } | Hold::Write { .. } | Hold::Leader { .. } => 1,
        };
        if self.config.topology.queues(keys) {
            wanted
        } else {
            Queue::Ignore
        }
    }

    /// Leaves the queue of `a` (a waiter that gave up), best effort: the
    /// entry expires on its own anyway. A lock handed over to it meanwhile
    /// is freed, and handed to the next waiter.
    pub(crate) fn dequeue(&self, a: &Acquisition) {
        let channel = self.channel_for(&a.keys);
        let channel = channel.as_deref().unwrap_or("");
        let call = scripts::dequeue(&a.keys, a.owner().as_str(), channel);
        for i in 0..self.instances.len() {
            let _ = self.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?));
        }
    }

    /// Runs one operation on instance `i`, bounded by the checkout and I/O
    /// timeouts.
    fn run_on(&self, i: usize, op: Op<'_>) -> Result<Value, Error> {
        let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
        self.guarded(i, || self.instance(i)?.run(checkout, io, op, None))
    }

    /// As [`RawLock::run_on`], for a renewal: on the connection set aside for
    /// renewals when it is free.
    fn run_renewal_on(&self, i: usize, op: Op<'_>) -> Result<Value, Error> {
        let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
        self.guarded(i, || self.instance(i)?.run_renewal(checkout, io, op))
    }

    /// Runs `call` on instance `i` through its breaker: with several
    /// instances, one whose connection failed is not asked again (the call
    /// fails at once, as if it had) until its break is over. A failed call
    /// only ever counts against a decision, so skipping one is always safe.
    fn guarded<T>(&self, i: usize, call: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        let breaker = self.breakers.get(i).filter(|_| self.instances.len() > 1);
        let Some(breaker) = breaker else {
            return call();
        };
        breaker.check()?;
        let result = call();
        breaker.note(&result);
        result
    }

    fn instance(&self, i: usize) -> Result<&Arc<dyn Connector>, Error> {
        self.instances
            .get(i)
            .ok_or_else(|| Error::InvalidInput(format!("no instance {i}")))
    }

    /// Sets a connection aside for renewals on every instance (a guard with
    /// a watchdog was just granted). Never waits.
    pub(crate) fn reserve_for_renewals(&self) {
        for instance in &self.instances {
            instance.reserve();
        }
    }

    /// The error for a decision that errors left open: the instance's own
    /// error with one instance, `NoQuorum` with several.
    fn quorum_error(&self, granted: usize, last: Option<Error>) -> Error {
        match (self.instances.len(), last) {
            // A server that cannot run the locker at all is said as such.
            (1, Some(e)) | (_, Some(e @ Error::Unsupported { .. })) => e,
            (n, last) => Error::NoQuorum {
                granted,
                needed: quorum::quorum(n),
                last: last.map(Box::new),
            },
        }
    }

    /// One acquire attempt on every instance. A grant on fewer than a
    /// majority is released everywhere at once, including on the instances
    /// that seemed to fail.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        a: &Arc<Acquisition>,
        queue: Queue,
    ) -> Result<Outcome, Error> {
        let n = self.instances.len();
        if n > 1 {
            // A fresh owner token for each Redlock attempt (see `owner`).
            *a.owner.lock() = Token::new()?;
        }
        let (lead, bound) = proposal_lead_and_bound(self.config.ttl);
        let bound = u64::try_from(bound.as_micros()).unwrap_or(u64::MAX);
        let proposal = (n > 1)
            .then(|| a.proposal(lead, self.config.clock_ahead))
            .flatten()
            .map(|p| (p, bound));
        let sent = Instant::now();
        let at_once = proposal.as_ref().map(|(p, bound)| (p.as_str(), *bound));
        let answers = match self.acquire_at_once(a, queue, at_once) {
            Some(answers) => answers,
            None => {
                let (this, a2) = (Arc::clone(self), Arc::clone(a));
                self.fan.run(n, move |i| {
                    let proposal = proposal.as_ref().map(|(p, bound)| (p.as_str(), *bound));
                    this.acquire_on(i, &a2, queue, proposal)
                })
            }
        };
        let ttl = self.config.ttl;
        let drift = time::drift(ttl, self.config.drift);
        let answered: Arc<[bool]> = answers.iter().map(Result::is_ok).collect();
        match quorum::decide_acquire(answers, ttl, sent.elapsed(), drift) {
            // One instance has nothing to write back to; with several,
            // every one that minted the grant's token already has it.
            Acquired::Granted { fence, everywhere } if n == 1 || everywhere => {
                Ok(Outcome::Granted { sent, fence })
            }
            Acquired::Granted { fence, .. } => match self.raise_fences(a, fence, &answered) {
                Ok(true) if quorum::validity(ttl, sent.elapsed(), drift).is_some() => {
                    Ok(Outcome::Granted { sent, fence })
                }
                // The write-back took what was left of the lease (the
                // process paused, say): the lease is over before it is
                // returned, and a rival may have been granted a larger
                // token meanwhile. Too slow, as a slow majority is.
                Ok(true) => {
                    self.release_quietly(a);
                    Err(self.quorum_error(0, None))
                }
                // Another client holds the lock on an instance that
                // answered (a rival's failed attempt, for a moment): a
                // grant on a bare majority would fall to one instance's
                // data loss, so it is not kept. The attempt counts as busy.
                Ok(false) => {
                    self.release_quietly(a);
                    Ok(Outcome::Busy {
                        holder_ttl: None,
                        delay: None,
                        sent,
                    })
                }
                Err(e) => {
                    self.release_quietly(a);
                    Err(e)
                }
            },
            Acquired::Busy { holder_ttl, delay } => {
                if n > 1 {
                    self.release_quietly(a);
                }
                Ok(Outcome::Busy {
                    holder_ttl,
                    delay,
                    sent,
                })
            }
            Acquired::NoQuorum { granted, last } => {
                if n > 1 {
                    self.release_quietly(a);
                }
                Err(self.quorum_error(granted, last))
            }
        }
    }

    /// The acquire script on instance `i`, then `WAIT` when replicas must
    /// acknowledge. On an I/O error (the script may have run although no
    /// reply came back), the release by token follows on the *same*
    /// connection, so Redis runs it after the acquire whenever the acquire
    /// runs: no orphan lock waits out its TTL; when that connection is gone
    /// (cut after the server answered), on a fresh one. The connector does
    /// that on a thread of its own, so this returns within the checkout and
    /// I/O timeouts. With too few acknowledgements, the release is sent at
    /// once on the same connection.
    fn acquire_on(
        &self,
        i: usize,
        a: &Acquisition,
        queue: Queue,
        proposal: Option<(&str, u64)>,
    ) -> Result<Grant, Error> {
        let config = &self.config;
        let (call, release_by_token) = self.acquire_call(a, queue, proposal);
        let mut grant = None;
        let (checkout, io) = (config.checkout_timeout, config.io_timeout);
        let checked = self.version_checked.get(i);
        let mut op = |c: &mut dyn ConnectionLike| {
            if let Some(checked) = checked.filter(|c| !c.load(Ordering::Relaxed)) {
                server::check_version(c)?;
                checked.store(true, Ordering::Relaxed);
            }
            let g = a.grant_in(&call.invoke::<Value>(c)?)?;
            if matches!(g, Grant::Granted(_)) {
                if let Err(e) = acknowledged(config, c) {
                    if matches!(e, Error::NotReplicated { .. } | Error::Unsupported { .. }) {
                        // Its own failure changes nothing we report. (After
                        // an I/O error the connector releases; see above.)
                        let _ = release_by_token.query::<Value>(c);
                    }
                    return Err(e);
                }
            }
            grant = Some(g);
            Ok(Value::Nil)
        };
        self.guarded(i, || {
            self.instance(i)?
                .run(checkout, io, &mut op, Some(release_by_token.clone()))
        })?;
        grant.ok_or_else(|| replies::unexpected("acquire", &Value::Nil))
    }

    /// The acquire script's call for `a`, and the release by token that
    /// undoes it (a plain `EVAL`, see [`scripts::release_by_eval`]).
    fn acquire_call(
        &self,
        a: &Acquisition,
        queue: Queue,
        proposal: Option<(&str, u64)>,
    ) -> (scripts::Call, redis::Cmd) {
        let config = &self.config;
        let ttl = time::millis_ceil(config.ttl);
        let owner = a.owner();
        let metadata = a.metadata.as_deref().unwrap_or(&config.metadata);
        let token = owner.as_str();
        let delay = time::millis_ceil(self.lock_delay(&a.keys));
        let call = scripts::acquire(&a.keys, token, ttl, metadata, queue, proposal, delay);
        (call, scripts::release_by_eval(&a.keys, token, delay > 0))
    }
}

impl Acquisition {
    /// What an acquire script's `reply` says, noted here: the permit
    /// granted, and the counter a refusal saw (see `floor`).
    fn grant_in(&self, reply: &Value) -> Result<Grant, Error> {
        let (g, floor) = if self.is_permit() {
            let (g, floor, slot) = replies::parse_permit_acquire(reply)?;
            if let Some(slot) = slot {
                self.slot.store(slot, Ordering::SeqCst);
            }
            (g, floor)
        } else {
            replies::parse_acquire(reply)?
        };
        self.floor.store(floor, Ordering::SeqCst);
        Ok(g)
    }
}

mod audit;
mod election;
mod guarded;
mod handed;
mod held;
mod later;
mod mutex;
mod operate;
mod permits;
mod redlock;
mod release;
mod renew;
mod rw;

pub(crate) use rw::Downgrade;

#[cfg(test)]
mod model_vs_redis;
