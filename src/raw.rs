//! The lock's mechanism under `Locker` and `Guard`, for one instance or a
//! Redlock quorum: each operation runs its script (through the typed
//! callers of `protocol::scripts`) on every instance, in parallel when
//! there are several, parses the replies (`protocol::replies`), and a pure
//! function of `quorum.rs` decides.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionLike, Value};

use crate::config::Config;
use crate::conn::{Connector, Op};
use crate::info::LockInfo;
use crate::lease::watchdog::Renewal;
use crate::lease::Lease;
use crate::protocol::keys::{self, Hold, LockKeys};
use crate::protocol::replies::{self, Handed, LockValue};
use crate::protocol::scripts;
pub(crate) use crate::protocol::scripts::Queue;
use crate::quorum::{self, Acquired, Grant, Raised, Released, RenewDecision};
use crate::server;
use crate::time;
use crate::token::Token;
use crate::wake::listener::Listener;
use crate::wake::waiters::Signal;
use crate::Error;

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
}

/// No permit granted yet.
const NO_SLOT: usize = usize::MAX;

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
fn proposal_lead_and_bound(ttl: Duration) -> (Duration, Duration) {
    (PROPOSAL_LEAD.min(ttl / 2), PROPOSAL_BOUND.min(ttl))
}

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
            floor: AtomicU64::new(0),
            slot: AtomicUsize::new(NO_SLOT),
            stalled: AtomicU64::new(0),
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

    /// Which permit of a semaphore this acquisition holds, once granted;
    /// `None` for a lock.
    pub(crate) fn permit_index(&self) -> Option<u32> {
        let slot = self.slot.load(Ordering::SeqCst);
        (slot != NO_SLOT)
            .then(|| u32::try_from(slot).ok())
            .flatten()
    }

    /// The acquisition of the permit that was granted, for its guard:
    /// its one lock key, with the semaphore's queue (a release hands that
    /// permit to the next waiter). A lock's acquisition is returned as it is.
    pub(crate) fn granted_permit(self: Arc<Self>) -> Result<Arc<Acquisition>, Error> {
        if !self.is_permit() {
            return Ok(self);
        }
        let slot = self.slot.load(Ordering::SeqCst);
        let key = self
            .keys
            .locks
            .get(slot)
            .cloned()
            .ok_or_else(|| replies::unexpected("permit", &Value::Int(0)))?;
        let mut keys = self.keys.clone();
        keys.locks = Arc::from([key]);
        keys.hold = Hold::Lock;
        Ok(Arc::new(Acquisition {
            token: self.token.clone(),
            owner: Mutex::new(self.owner()),
            caller_keys: Arc::clone(&self.caller_keys),
            keys,
            floor: AtomicU64::new(self.floor.load(Ordering::SeqCst)),
            slot: AtomicUsize::new(slot),
            stalled: AtomicU64::new(self.stalled.load(Ordering::SeqCst)),
        }))
    }

    /// Redlock: the fencing token this attempt asks every master to mint,
    /// this machine's clock in µs plus `lead` (and above any counter a
    /// refused attempt saw). When every master mints it, they are left as
    /// the grant's write-back would leave them, so it is not needed; when
    /// one counts past it (or it leads that master's clock by more than
    /// [`PROPOSAL_BOUND`]), they mint apart and the write-back makes them
    /// agree, as before. None for a clock before 1970.
    fn proposal(&self, lead: Duration, clock_ahead: Duration) -> Option<String> {
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
    fn note_stalled<T>(&self, answers: &[Result<T, Error>]) {
        for (i, answer) in answers.iter().enumerate().take(64) {
            if matches!(answer, Err(e) if e.is_connection()) {
                self.stalled.fetch_or(1 << i, Ordering::SeqCst);
            }
        }
    }

    /// Whether a call that puts our keys on master `i` may still arrive.
    fn stalled_on(&self, i: usize) -> bool {
        i < 64 && self.stalled.load(Ordering::SeqCst) & (1 << i) != 0
    }

    /// A semaphore's permit, not granted yet.
    fn is_permit(&self) -> bool {
        matches!(self.keys.hold, Hold::Permit)
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
        /// When the attempt was sent: a lock handed over to this acquisition
        /// afterwards counts its lease from here.
        sent: Instant,
    },
}

/// How many times a Redlock grant tries to take the instances where a rival
/// held the lock for a moment before it gives the grant up.
const REPAIR_TRIES: u32 = 3;

/// With [`Builder::min_replicas`](crate::Builder::min_replicas): waits
/// (`WAIT`, on the connection that wrote) until that many replicas have
/// what was written, within the replica timeout.
fn acknowledged(config: &Config, c: &mut dyn ConnectionLike) -> Result<(), Error> {
    if config.min_replicas == 0 {
        return Ok(());
    }
    let acked = redis::cmd("WAIT")
        .arg(config.min_replicas)
        .arg(time::millis_ceil(config.replica_timeout))
        .query::<u64>(c)?;
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
    pub(crate) fn new(instances: Vec<Arc<dyn Connector>>, config: Config) -> Self {
        let announce = config.topology.announces();
        let channel = announce.then(|| config.keys.release_channel());
        RawLock {
            version_checked: instances.iter().map(|_| AtomicBool::new(false)).collect(),
            breakers: instances.iter().map(|_| Breaker::default()).collect(),
            fan: FanOut::new(instances.len()),
            later: later::Later::new(instances.len()),
            instances,
            config,
            wake: Arc::new(Listener::new(channel)),
        }
    }

    /// Makes sure this locker listens for releases (see
    /// [`Listener::ensure`]). True when the listener has just come up: the
    /// caller should try again at once, as a release may have slipped by.
    pub(crate) fn ensure_listening(&self) -> bool {
        let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
        self.wake.ensure(self.instances.first(), checkout, io)
    }

    pub(crate) fn instances(&self) -> &[Arc<dyn Connector>] {
        &self.instances
    }

    pub(crate) fn signal(&self) -> &Signal {
        self.wake.waiters()
    }

    /// Checks the keys and prepares an acquisition (a fresh token).
    pub(crate) fn prepare(&self, keys: &[&str]) -> Result<Acquisition, Error> {
        keys::validate_keys(keys)?;
        let cluster = self.config.topology.is_cluster();
        let lock_keys = self.config.keys.lock_keys(keys, cluster);
        if cluster {
            keys::same_slot(keys, &lock_keys.locks)?;
        }
        let caller_keys = keys.iter().map(|k| (*k).to_owned()).collect();
        Acquisition::new(caller_keys, lock_keys)
    }

    /// The Redis keys of the semaphore `name` of `permits` permits.
    fn permit_keys(&self, name: &str, permits: u32) -> LockKeys {
        let cluster = self.config.topology.is_cluster();
        self.config.keys.permit_keys(name, permits, cluster)
    }

    /// Prepares the acquisition of one permit of the semaphore `name` of
    /// `permits` permits (both checked already).
    pub(crate) fn prepare_permit(&self, name: &str, permits: u32) -> Result<Acquisition, Error> {
        let keys = self.permit_keys(name, permits);
        Acquisition::new(Arc::from([name.to_owned()]), keys)
    }

    /// Prepares the acquisition of a read hold (`read`) or the write hold
    /// of the read-write lock `name` (checked already). A read hold gets a
    /// key of its own, named by an id drawn for it.
    pub(crate) fn prepare_rw(&self, name: &str, read: bool) -> Result<Acquisition, Error> {
        let cluster = self.config.topology.is_cluster();
        let id = if read { Some(Token::key_id()?) } else { None };
        let keys = self.config.keys.rw_keys(name, id.as_deref(), cluster);
        Acquisition::new(Arc::from([name.to_owned()]), keys)
    }

    /// How many permits of the semaphore `name` of `permits` permits are
    /// free now.
    pub(crate) fn free_permits(&self, name: &str, permits: u32) -> Result<u32, Error> {
        let keys = self.permit_keys(name, permits);
        let reply = self.run_on(0, &mut |c| {
            Ok(redis::cmd("EXISTS").arg(&*keys.locks).query::<Value>(c)?)
        })?;
        let taken = u32::try_from(replies::int_reply(&reply, "exists")?).unwrap_or(u32::MAX);
        let all = u32::try_from(keys.locks.len()).unwrap_or(u32::MAX);
        Ok(all.saturating_sub(taken))
    }

    /// The queue mode for an attempt of `a` that wants `wanted`: queues are
    /// kept for single-key locks, and not in Redlock mode.
    pub(crate) fn queue_mode(&self, a: &Acquisition, wanted: Queue) -> Queue {
        // A semaphore queues for one permit, whichever it is; a read-write
        // lock queues for one lock.
        let keys = match a.keys.hold {
            Hold::Lock => a.keys.locks.len(),
            Hold::Permit | Hold::Read { .. } | Hold::Write { .. } => 1,
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
        let channel = self.wake.channel().unwrap_or("");
        let call = scripts::dequeue(&a.keys, a.owner().as_str(), channel);
        for i in 0..self.instances.len() {
            let _ = self.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?));
        }
    }

    /// Whether a lock handed over to `a`, with fencing token `fence`, may be
    /// taken as granted without a round trip: it was handed over after the
    /// latest refused attempt (sent at `sent`), whose claim (see
    /// [`RawLock::claim`]) then still has most of its length, and no replica
    /// must acknowledge it first.
    pub(crate) fn takes_handed(
        &self,
        a: &Acquisition,
        fence: u64,
        sent: Instant,
        claim: Duration,
    ) -> bool {
        // A permit handed over is taken up by the next attempt, which says
        // which permit it is; of a read-write lock, only the writer key is
        // handed over (to a writer).
        matches!(a.keys.hold, Hold::Lock | Hold::Write { .. })
            && self.config.min_replicas == 0
            && fence > a.floor.load(Ordering::SeqCst)
            && sent.elapsed() < claim / 3
    }

    /// The claim a release hands over to a waiter that stays queued for
    /// `stay`: the TTL or the stay, whichever is shorter, in whole
    /// milliseconds as the scripts see them.
    pub(crate) fn claim(&self, stay: Duration) -> Duration {
        let ms = time::millis_ceil(stay)
            .max(1)
            .min(time::millis_ceil(self.config.ttl));
        Duration::from_millis(ms)
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
        match &result {
            Err(e) if e.is_connection() => breaker.trip(),
            _ => breaker.reset(),
        }
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
        let (this, a2) = (Arc::clone(self), Arc::clone(a));
        let answers = self.fan.run(n, move |i| {
            let proposal = proposal.as_ref().map(|(p, bound)| (p.as_str(), *bound));
            this.acquire_on(i, &a2, queue, proposal)
        });
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
                        sent,
                    })
                }
                Err(e) => {
                    self.release_quietly(a);
                    Err(e)
                }
            },
            Acquired::Busy { holder_ttl } => {
                if n > 1 {
                    self.release_quietly(a);
                }
                Ok(Outcome::Busy { holder_ttl, sent })
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
        let ttl = time::millis_ceil(config.ttl);
        let owner = a.owner();
        let (token, metadata) = (owner.as_str(), &config.metadata);
        let call = scripts::acquire(&a.keys, token, ttl, metadata, queue, proposal);
        let release_by_token = || scripts::release_by_eval(&a.keys, token);
        let mut grant = None;
        let (checkout, io) = (config.checkout_timeout, config.io_timeout);
        let checked = self.version_checked.get(i);
        let mut op = |c: &mut dyn ConnectionLike| {
            if let Some(checked) = checked.filter(|c| !c.load(Ordering::Relaxed)) {
                server::check_version(c)?;
                checked.store(true, Ordering::Relaxed);
            }
            let reply = call.invoke::<Value>(c)?;
            let (g, floor) = if a.is_permit() {
                let (g, floor, slot) = replies::parse_permit_acquire(&reply)?;
                if let Some(slot) = slot {
                    a.slot.store(slot, Ordering::SeqCst);
                }
                (g, floor)
            } else {
                replies::parse_acquire(&reply)?
            };
            a.floor.store(floor, Ordering::SeqCst);
            if matches!(g, Grant::Granted(_)) {
                if let Err(e) = acknowledged(config, c) {
                    if matches!(e, Error::NotReplicated { .. }) {
                        // Its own failure changes nothing we report. (After
                        // an I/O error the connector releases; see above.)
                        let _ = release_by_token().query::<Value>(c);
                    }
                    return Err(e);
                }
            }
            grant = Some(g);
            Ok(Value::Nil)
        };
        self.guarded(i, || {
            self.instance(i)?
                .run(checkout, io, &mut op, Some(release_by_token()))
        })?;
        grant.ok_or_else(|| replies::unexpected("acquire", &Value::Nil))
    }

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
    fn raise_fences(
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
            let call =
                scripts::raise_fence(&a.keys, fence, owner.as_str(), &this.config.metadata, ttl);
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

    /// Releases on every instance, ignoring the outcome (clean-up paths).
    /// Never sent again later: the acquisition may try again with the same
    /// token.
    fn release_quietly(self: &Arc<Self>, a: &Arc<Acquisition>) {
        let _ = self.release_everywhere(a);
    }

    /// Deletes the keys still owned by `a` on every instance, announces the
    /// release, and hands a single-key lock to the first live waiter in its
    /// queue. `Ok(true)`: a majority still had the lock; `Ok(false)`: it had
    /// been lost. With the hand-over, if there was one.
    ///
    /// A guard's release, the end of `a`'s token: with several instances,
    /// one that could not be reached is sent it again once it answers, and
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
                let failed = matches!(answer, Err(e) if e.is_connection());
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
        let queued =
            self.wake.channel().is_some() && self.queue_mode(a, Queue::Respect) != Queue::Ignore;
        let owner = a.owner();
        let (this, a2) = (Arc::clone(self), Arc::clone(a));
        let answers = self.fan.run(self.instances.len(), move |i| {
            let channel = this.wake.channel().unwrap_or("");
            let call = scripts::release(&a2.keys, owner.as_str(), channel, queued);
            let reply = this.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            let (deleted, to) = replies::parse_release(&reply)?;
            Ok((deleted, to))
        });
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

    /// One owner-checked renewal of `lease` on every instance, for `ttl`
    /// (`None`: the lease's own TTL, read inside the serialized section, so
    /// that a renewal never undoes an `extend` that confirmed before it),
    /// recorded in the lease. Serialized per lease, so concurrent `extend`
    /// and watchdog calls confirm in the order Redis applied them, and never
    /// started once the guard has stopped the lease.
    ///
    /// With several instances (Redlock), a key of ours found missing on an
    /// instance (its data lost) is put back with our value and the TTL, and
    /// that instance counts as confirmed only then: a majority that erodes
    /// one instance at a time is repaired, not silently lost.
    pub(crate) fn renew(
        self: &Arc<Self>,
        lease: &Lease,
        a: &Arc<Acquisition>,
        fence: u64,
        ttl: Option<Duration>,
    ) -> Result<Renewal, Error> {
        lease
            .serialized(|| {
                let ttl = ttl.unwrap_or_else(|| lease.schedule().0);
                self.renew_now(lease, a, fence, ttl)
            })
            .unwrap_or(Ok(Renewal::Stopped))
    }

    fn renew_now(
        self: &Arc<Self>,
        lease: &Lease,
        a: &Arc<Acquisition>,
        fence: u64,
        ttl: Duration,
    ) -> Result<Renewal, Error> {
        if lease.is_lost() {
            return Ok(Renewal::Lost);
        }
        let owner = a.owner();
        let repair = self.config.topology.is_redlock().then(|| {
            let value = LockValue {
                token: owner.as_str(),
                fence,
                metadata: &self.config.metadata,
            };
            (value.format(), fence)
        });
        let sent = Instant::now();
        let noted = Arc::clone(a);
        let (this, a) = (Arc::clone(self), Arc::clone(a));
        let answers = self.fan.run(self.instances.len(), move |i| {
            let repair = repair
                .as_ref()
                .map(|(value, fence)| (value.as_str(), *fence));
            let call = scripts::renew(&a.keys, owner.as_str(), time::millis_ceil(ttl), repair);
            let reply = this.run_renewal_on(i, &mut |c| {
                let reply = call.invoke::<Value>(c)?;
                // A renewal counts once the replicas have it too: else a
                // failover to one of them could find the lock expired.
                if reply == Value::Int(1) {
                    acknowledged(&this.config, c)?;
                }
                Ok(reply)
            })?;
            Ok(replies::int_reply(&reply, "renew")? == 1)
        });
        if self.instances.len() > 1 {
            noted.note_stalled(&answers);
        }
        match quorum::decide_renew(answers) {
            RenewDecision::Confirmed { rival } if lease.confirm(sent, ttl) => {
                // A rival's attempt holds the key on an instance for a
                // moment: come back soon to take it, rather than a third of
                // the TTL later, so that a bare majority does not last.
                if rival {
                    lease.hurry();
                } else {
                    lease.unhurry();
                }
                Ok(Renewal::Confirmed)
            }
            RenewDecision::Confirmed { .. } | RenewDecision::Lost => {
                lease.mark_lost();
                Ok(Renewal::Lost)
            }
            RenewDecision::Failed { confirmed, last } => Err(self.quorum_error(confirmed, last)),
        }
    }

    /// Sets the keys of `a` to expire `ttl` from now, where they are still
    /// ours, and leaves them (no delete, no announcement, no hand-over):
    /// the end of a hold that must last until a given time. `Ok(true)`: a
    /// majority still had them; `Ok(false)`: the lease had been lost. The
    /// guard's watchdog must be stopped first.
    pub(crate) fn expire(
        self: &Arc<Self>,
        a: &Arc<Acquisition>,
        ttl: Duration,
    ) -> Result<bool, Error> {
        let owner = a.owner();
        let (this, a) = (Arc::clone(self), Arc::clone(a));
        let answers = self.fan.run(self.instances.len(), move |i| {
            let call = scripts::renew(&a.keys, owner.as_str(), time::millis_ceil(ttl), None);
            let reply = this.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            Ok(replies::int_reply(&reply, "expire")? == 1)
        });
        match quorum::decide_renew(answers) {
            RenewDecision::Confirmed { .. } => Ok(true),
            RenewDecision::Lost => Ok(false),
            RenewDecision::Failed { confirmed, last } => Err(self.quorum_error(confirmed, last)),
        }
    }

    /// Who holds `key`, as a majority of instances sees it.
    pub(crate) fn holder(self: &Arc<Self>, key: &str) -> Result<Option<LockInfo>, Error> {
        keys::validate_key(key)?;
        let lock_key = self.config.keys.lock_key(key);
        let this = Arc::clone(self);
        let answers = self.fan.run(self.instances.len(), move |i| {
            let call = scripts::holder(&lock_key);
            let reply = this.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            replies::parse_holder(&reply)
        });
        match quorum::decide_holder(answers) {
            Ok(info) => Ok(info),
            Err(Acquired::NoQuorum { granted, last }) => Err(self.quorum_error(granted, last)),
            Err(_) => Ok(None),
        }
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
struct Breaker {
    /// Until when the master is skipped, and the next break's length.
    state: Mutex<Option<(Instant, Duration)>>,
}

impl Breaker {
    /// `Err` while the break lasts.
    fn check(&self) -> Result<(), Error> {
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
    fn trip(&self) {
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

    fn reset(&self) {
        let mut state = self.state.lock();
        if state.is_some() {
            *state = None;
        }
    }
}

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

mod later;

#[cfg(test)]
mod model_vs_redis;
