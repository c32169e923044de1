//! The Redis side of every operation, on one instance or on a Redlock
//! quorum: each operation runs a script on every instance (in parallel when
//! there are several), and a pure function in `redlock.rs` decides.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::{ConnectionLike, Value};

use crate::builder::Config;
use crate::info::LockInfo;
use crate::keys;
use crate::lease::Lease;
use crate::pool::{Connector, Heard};
use crate::redlock::{self, Acquired, Grant, Released, RenewDecision};
use crate::scripts;
use crate::time;
use crate::token::Token;
use crate::wait::Signal;
use crate::watchdog::Renewal;
use crate::Error;

/// State shared by a locker's clones, its guards and their watchdogs.
pub(crate) struct Shared {
    instances: Vec<Arc<dyn Connector>>,
    pub(crate) config: Config,
    /// Wakes this locker's waiters when one of their keys is released.
    released: Signal,
    /// The release channel, when releases are announced (one instance, not
    /// a cluster); `None` means waiters poll with their backoff.
    channel: Option<String>,
    /// The state of this locker's release listener.
    listener: Mutex<Listener>,
    listener_changed: Condvar,
}

/// The release listener of a locker: one thread and one pooled connection,
/// started by the first waiter, shared by all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listener {
    Off,
    Starting,
    On,
    /// Not possible with this pool; waiters poll.
    Unsupported,
    /// Failed to start; not retried before this instant.
    Failed(Instant),
}

// `Shared` is `Send + Sync`: connectors are required to be, and `Config` and
// `Signal` hold plain data behind locks. So `Locker` and `Guard` are too.

/// One acquisition: its token (kept across retries, so a retry after a lost
/// reply finds the key already ours) and its keys.
pub(crate) struct Acquisition {
    pub(crate) token: Token,
    pub(crate) caller_keys: Vec<String>,
    /// The lock keys in Redis, in the caller's order.
    pub(crate) redis_keys: Arc<[String]>,
    fence_key: String,
    /// The waiters' queue and their entries (used for single-key locks on
    /// one instance or a cluster; see `scripts::ACQUIRE`).
    queue: (String, String),
    /// The fencing counter as the latest refused attempt saw it: a lock
    /// handed over to this acquisition with a token at or below it was
    /// handed over before that attempt, and lost since.
    floor: AtomicU64,
}

/// How an attempt treats the waiters' queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    /// Multi-key locks and Redlock: no queue.
    Ignore,
    /// `try_lock`: a free lock with waiters queued is theirs.
    Respect,
    /// A waiting `lock`: respect the queue, and join it (or stay in it) for
    /// this long when the lock cannot be had now.
    Join(Duration),
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

/// A lock that a release handed over to a waiter: its owner token and
/// fencing token.
pub(crate) type Handed = (String, u64);

impl Shared {
    pub(crate) fn new(instances: Vec<Arc<dyn Connector>>, config: Config) -> Self {
        let announce = instances.len() == 1 && !config.cluster;
        let channel = announce.then(|| config.keys.release_channel());
        Shared {
            instances,
            config,
            released: Signal::default(),
            channel,
            listener: Mutex::new(Listener::Off),
            listener_changed: Condvar::new(),
        }
    }

    /// Makes sure this locker listens for releases. Returns true when the
    /// listener has just come up: a release may have slipped by before it
    /// did, so the caller should try again at once rather than wait.
    pub(crate) fn ensure_listening(self: &Arc<Self>) -> bool {
        let Some(channel) = &self.channel else {
            return false;
        };
        let mut state = self.listener.lock();
        match *state {
            Listener::On | Listener::Unsupported => return false,
            Listener::Failed(until) if Instant::now() < until => return false,
            Listener::Starting => return self.await_listener(&mut state),
            Listener::Off | Listener::Failed(_) => *state = Listener::Starting,
        }
        drop(state);
        let weak = Arc::downgrade(self);
        let started = self.instances.first().map(|instance| {
            instance.listen(
                channel.clone(),
                self.config.checkout_timeout,
                self.config.io_timeout,
                Box::new(move |heard| hear(&weak, heard)),
            )
        });
        let mut state = self.listener.lock();
        match started {
            // Wait (bounded) for the subscription, so that a release from
            // now on is heard.
            Some(Ok(true)) => return self.await_listener(&mut state),
            Some(Ok(false)) | None => *state = Listener::Unsupported,
            Some(Err(_)) => *state = Listener::Failed(Instant::now() + Duration::from_secs(1)),
        }
        self.listener_changed.notify_all();
        false
    }

    /// Waits (at most the I/O timeout) while the listener is starting, and
    /// says whether it came up. One that does not come up in time counts as
    /// failed for a second, so waiters do not queue behind it.
    fn await_listener(&self, state: &mut parking_lot::MutexGuard<'_, Listener>) -> bool {
        let deadline = Instant::now() + self.config.io_timeout;
        while **state == Listener::Starting {
            if self
                .listener_changed
                .wait_until(state, deadline)
                .timed_out()
            {
                if **state == Listener::Starting {
                    **state = Listener::Failed(Instant::now() + Duration::from_secs(1));
                    self.listener_changed.notify_all();
                }
                break;
            }
        }
        **state == Listener::On
    }

    fn set_listener(&self, to: Listener) {
        *self.listener.lock() = to;
        self.listener_changed.notify_all();
    }

    pub(crate) fn instances(&self) -> &[Arc<dyn Connector>] {
        &self.instances
    }

    pub(crate) fn signal(&self) -> &Signal {
        &self.released
    }

    /// Checks the keys and prepares an acquisition (a fresh token).
    pub(crate) fn prepare(&self, keys: &[&str]) -> Result<Acquisition, Error> {
        keys::validate_keys(keys)?;
        let space = &self.config.keys;
        let redis_keys: Arc<[String]> = keys.iter().map(|k| space.lock_key(k)).collect();
        if self.config.cluster {
            keys::same_slot(keys, &redis_keys)?;
        }
        let first = keys.first().copied().unwrap_or_default();
        Ok(Acquisition {
            token: Token::new()?,
            caller_keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            fence_key: space.fence_key_for(&redis_keys, self.config.cluster),
            queue: space.queue_keys(first, self.config.cluster),
            redis_keys,
            floor: AtomicU64::new(0),
        })
    }

    /// The queue mode for an attempt of `a` that wants `wanted`: queues are
    /// kept for single-key locks, and not in Redlock mode.
    pub(crate) fn queue_mode(&self, a: &Acquisition, wanted: Queue) -> Queue {
        if a.redis_keys.len() == 1 && self.instances.len() == 1 {
            wanted
        } else {
            Queue::Ignore
        }
    }

    /// Leaves the queue of `a` (a waiter that gave up), best effort: the
    /// entry expires on its own anyway. A lock handed over to it meanwhile
    /// is freed, and handed to the next waiter.
    pub(crate) fn dequeue(&self, a: &Acquisition) {
        let mut call = scripts::DEQUEUE.prepare_invoke();
        call.key(&*a.redis_keys)
            .key(&a.fence_key)
            .key(&a.queue.0)
            .key(&a.queue.1)
            .arg(a.token.as_str())
            .arg(self.channel.as_deref().unwrap_or(""));
        for i in 0..self.instances.len() {
            let _ = self.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?));
        }
    }

    /// Whether a lock handed over to `a`, with fencing token `fence`, may be
    /// taken as granted without a round trip: it was handed over after the
    /// latest refused attempt (sent at `sent`), whose claim (see
    /// [`Shared::claim`]) then still has most of its length, and no replica
    /// must acknowledge it first.
    pub(crate) fn takes_handed(
        &self,
        a: &Acquisition,
        fence: u64,
        sent: Instant,
        claim: Duration,
    ) -> bool {
        self.config.min_replicas == 0
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
    fn run_on(
        &self,
        i: usize,
        op: &mut dyn FnMut(&mut dyn ConnectionLike) -> Result<Value, Error>,
    ) -> Result<Value, Error> {
        let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
        self.instance(i)?.run(checkout, io, op, None)
    }

    /// As [`Shared::run_on`], for a renewal: on the connection set aside for
    /// renewals when it is free.
    fn run_renewal_on(
        &self,
        i: usize,
        op: &mut dyn FnMut(&mut dyn ConnectionLike) -> Result<Value, Error>,
    ) -> Result<Value, Error> {
        let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
        self.instance(i)?.run_renewal(checkout, io, op)
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
            (1, Some(e)) => e,
            (n, last) => Error::NoQuorum {
                granted,
                needed: redlock::quorum(n),
                last: last.map(Box::new),
            },
        }
    }

    /// One acquire attempt on every instance. A grant on fewer than a
    /// majority is released everywhere at once, including on the instances
    /// that seemed to fail.
    pub(crate) fn acquire(&self, a: &Acquisition, queue: Queue) -> Result<Outcome, Error> {
        let n = self.instances.len();
        let sent = Instant::now();
        let answers = redlock::fan_out(n, |i| self.acquire_on(i, a, queue));
        let ttl = self.config.ttl;
        let drift = time::drift(ttl, self.config.drift);
        match redlock::decide_acquire(answers, ttl, sent.elapsed(), drift) {
            Acquired::Granted { fence } if n == 1 => Ok(Outcome::Granted { sent, fence }),
            Acquired::Granted { fence } => match self.raise_fences(a, fence) {
                Ok(true) if redlock::validity(ttl, sent.elapsed(), drift).is_some() => {
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
    fn acquire_on(&self, i: usize, a: &Acquisition, queue: Queue) -> Result<Grant, Error> {
        let config = &self.config;
        // The queue mode, and how long the queue keys outlive this waiter.
        let (mode, keep) = match queue {
            Queue::Ignore => (String::new(), 0),
            Queue::Respect => ("0".to_owned(), 0),
            Queue::Join(d) => {
                let ms = time::millis_ceil(d).max(1);
                (ms.to_string(), ms.saturating_add(1000))
            }
        };
        let mut call = scripts::ACQUIRE.prepare_invoke();
        call.key(&a.fence_key)
            .key(&a.queue.0)
            .key(&a.queue.1)
            .key(&*a.redis_keys)
            .arg(a.token.as_str())
            .arg(time::millis_ceil(config.ttl))
            .arg(&config.metadata)
            .arg(mode)
            .arg(keep);
        let mut grant = None;
        let (checkout, io) = (config.checkout_timeout, config.io_timeout);
        let mut op = |c: &mut dyn ConnectionLike| {
            let reply = call.invoke::<Value>(c)?;
            let (g, floor) = parse_acquire(&reply)?;
            a.floor.store(floor, Ordering::SeqCst);
            if matches!(g, Grant::Granted(_)) {
                if let Err(e) = acknowledged(config, c) {
                    if matches!(e, Error::NotReplicated { .. }) {
                        // Its own failure changes nothing we report. (After
                        // an I/O error the connector releases; see above.)
                        let _ = release_by_token(a).query::<Value>(c);
                    }
                    return Err(e);
                }
            }
            grant = Some(g);
            Ok(Value::Nil)
        };
        self.instance(i)?
            .run(checkout, io, &mut op, Some(release_by_token(a)))?;
        grant.ok_or_else(|| unexpected("acquire", &Value::Nil))
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
    fn raise_fences(&self, a: &Acquisition, fence: u64) -> Result<bool, Error> {
        let mut tries = 0;
        loop {
            let everywhere = self.raise_fences_once(a, fence)?;
            tries += 1;
            if everywhere || tries >= REPAIR_TRIES {
                return Ok(everywhere);
            }
        }
    }

    fn raise_fences_once(&self, a: &Acquisition, fence: u64) -> Result<bool, Error> {
        let answers = redlock::fan_out(self.instances.len(), |i| {
            let mut call = scripts::RAISE_FENCE.prepare_invoke();
            call.key(&a.fence_key)
                .key(&*a.redis_keys)
                .arg(fence)
                .arg(a.token.as_str())
                .arg(&self.config.metadata)
                .arg(time::millis_ceil(self.config.ttl));
            let reply = self.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            Ok(int_reply(&reply, "raise fence")? == 1)
        });
        let needed = redlock::quorum(self.instances.len());
        let confirmed = answers.iter().filter(|r| r.is_ok()).count();
        if confirmed >= needed {
            return Ok(!answers.iter().any(|r| matches!(r, Ok(false))));
        }
        let last = answers.into_iter().filter_map(Result::err).next_back();
        Err(Error::NoQuorum {
            granted: confirmed,
            needed,
            last: last.map(Box::new),
        })
    }

    /// Releases on every instance, ignoring the outcome (clean-up paths).
    fn release_quietly(&self, a: &Acquisition) {
        let _ = self.release(a);
    }

    /// Deletes the keys still owned by `a` on every instance, announces the
    /// release, and hands a single-key lock to the first live waiter in its
    /// queue. `Ok(true)`: a majority still had the lock; `Ok(false)`: it had
    /// been lost. With the hand-over, if there was one.
    pub(crate) fn release(&self, a: &Acquisition) -> Result<(bool, Option<Handed>), Error> {
        let channel = self.channel.as_deref().unwrap_or("");
        let queued = self.channel.is_some() && self.queue_mode(a, Queue::Respect) != Queue::Ignore;
        let handed = Mutex::new(None);
        let answers = redlock::fan_out(self.instances.len(), |i| {
            let mut call = scripts::RELEASE.prepare_invoke();
            call.key(&*a.redis_keys);
            if queued {
                call.key(&a.fence_key).key(&a.queue.0).key(&a.queue.1);
            }
            call.arg(a.token.as_str())
                .arg(channel)
                .arg(a.redis_keys.len());
            let reply = self.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            let (deleted, to) = parse_release(&reply)?;
            if to.is_some() {
                *handed.lock() = to;
            }
            Ok(usize::try_from(deleted).is_ok_and(|d| d == a.redis_keys.len()))
        });
        let handed = handed.into_inner();
        match redlock::decide_release(answers) {
            Released::Clean => Ok((true, handed)),
            Released::Lost => Ok((false, handed)),
            Released::Unknown { ours, last } => Err(self.quorum_error(ours, last)),
        }
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
        &self,
        lease: &Lease,
        a: &Acquisition,
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
        &self,
        lease: &Lease,
        a: &Acquisition,
        fence: u64,
        ttl: Duration,
    ) -> Result<Renewal, Error> {
        if lease.is_lost() {
            return Ok(Renewal::Lost);
        }
        let repair = (self.instances.len() > 1).then(|| {
            let token = a.token.as_str();
            (format!("{token}:{fence}:{}", self.config.metadata), fence)
        });
        let sent = Instant::now();
        let mut answers = redlock::fan_out(self.instances.len(), |i| {
            let mut call = scripts::RENEW.prepare_invoke();
            call.key(&*a.redis_keys)
                .arg(a.token.as_str())
                .arg(time::millis_ceil(ttl));
            if let Some((value, fence)) = &repair {
                call.key(&a.fence_key).arg(value).arg(*fence);
            }
            let reply = self.run_renewal_on(i, &mut |c| {
                let reply = call.invoke::<Value>(c)?;
                // A renewal counts once the replicas have it too: else a
                // failover to one of them could find the lock expired.
                if reply == Value::Int(1) {
                    acknowledged(&self.config, c)?;
                }
                Ok(reply)
            })?;
            Ok(int_reply(&reply, "renew")? == 1)
        });
        match redlock::decide_renew(&answers) {
            RenewDecision::Confirmed if lease.confirm(sent, ttl) => {
                // A rival's attempt holds the key on an instance for a
                // moment: come back soon to take it, rather than a third of
                // the TTL later, so that a bare majority does not last.
                if answers.iter().any(|a| matches!(a, Ok(false))) {
                    lease.hurry();
                } else {
                    lease.unhurry();
                }
                Ok(Renewal::Confirmed)
            }
            RenewDecision::Confirmed | RenewDecision::Lost => {
                lease.mark_lost();
                Ok(Renewal::Lost)
            }
            RenewDecision::Failed => {
                let confirmed = answers.iter().filter(|a| matches!(a, Ok(true))).count();
                let last = answers.drain(..).filter_map(Result::err).next_back();
                Err(self.quorum_error(confirmed, last))
            }
        }
    }

    /// Who holds `key`, as a majority of instances sees it.
    pub(crate) fn holder(&self, key: &str) -> Result<Option<LockInfo>, Error> {
        keys::validate_key(key)?;
        let lock_key = self.config.keys.lock_key(key);
        let answers = redlock::fan_out(self.instances.len(), |i| {
            let mut call = scripts::HOLDER.prepare_invoke();
            call.key(&lock_key);
            let reply = self.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            parse_holder(&reply)
        });
        match redlock::decide_holder(answers) {
            Ok(info) => Ok(info),
            Err(Acquired::NoQuorum { granted, last }) => Err(self.quorum_error(granted, last)),
            Err(_) => Ok(None),
        }
    }

    /// Wakes this locker's waiters after a release of `a` here: the one the
    /// lock was handed over to, or else those of its keys.
    pub(crate) fn notify_released(&self, a: &Acquisition, handed: Option<&Handed>) {
        match handed {
            Some((token, fence)) => self.released.hand_over(token, *fence),
            None => {
                for k in a.redis_keys.iter() {
                    self.released.notify(k);
                }
            }
        }
    }
}

/// The listener's callback: wake the waiters of a released key; stop when
/// the locker is gone.
fn hear(shared: &Weak<Shared>, heard: Heard<'_>) -> bool {
    let Some(shared) = shared.upgrade() else {
        return false;
    };
    match heard {
        Heard::Subscribed => shared.set_listener(Listener::On),
        Heard::Message(message) => match parse_announcement(message) {
            Some(Announced::Released(key)) => shared.released.notify(key),
            Some(Announced::Handed { token, fence }) => shared.released.hand_over(token, fence),
            None => {}
        },
        Heard::Idle => {}
        Heard::Refused => {
            log::warn!(
                target: "redmutex::listen",
                "the server refused to subscribe to the release channel (no ACL rights on it?): \
                 waiters of this locker poll with their backoff instead of being woken"
            );
            shared.set_listener(Listener::Unsupported);
            return false;
        }
        Heard::Gone => {
            shared.set_listener(Listener::Off);
            return false;
        }
    }
    true
}

/// The error for a reply that does not parse. It names the reply's shape,
/// never its contents: a reply may hold another holder's owner token.
fn unexpected(what: &str, reply: &Value) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected script reply",
        format!("{what}: {}", shape(reply)),
    )))
}

/// What kind of value `reply` is, without what it holds.
fn shape(reply: &Value) -> String {
    match reply {
        Value::Nil => "nil".to_owned(),
        Value::Int(_) => "an integer".to_owned(),
        Value::BulkString(b) => format!("a bulk string of {} bytes", b.len()),
        Value::SimpleString(s) => format!("a simple string of {} bytes", s.len()),
        Value::Okay => "OK".to_owned(),
        Value::Array(items) => format!(
            "an array of [{}]",
            items.iter().map(shape).collect::<Vec<_>>().join(", ")
        ),
        Value::ServerError(e) => format!("a server error ({:?})", e.kind()),
        _ => "another type".to_owned(),
    }
}

fn int_reply(reply: &Value, what: &str) -> Result<i64, Error> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected(what, other)),
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// A bulk string is the fencing token of a grant; an array of an integer
/// (the PTTL of the busy key, negative: no TTL) and the fencing counter is a
/// refusal. With the counter (0 for a grant).
fn parse_acquire(reply: &Value) -> Result<(Grant, u64), Error> {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(pttl), Value::Int(counter)] => Ok((
                Grant::Busy(u64::try_from(*pttl).ok().map(Duration::from_millis)),
                u64::try_from(*counter).unwrap_or(0),
            )),
            _ => Err(unexpected("acquire", reply)),
        },
        other => match text(other).and_then(|s| s.parse::<u64>().ok()) {
            Some(fence) => Ok((Grant::Granted(fence), 0)),
            None => Err(unexpected("acquire", reply)),
        },
    }
}

/// The number of keys deleted; after a hand-over, an array of that number,
/// the grantee's owner token and its fencing token.
fn parse_release(reply: &Value) -> Result<(i64, Option<Handed>), Error> {
    match reply {
        Value::Int(n) => Ok((*n, None)),
        Value::Array(items) => match items.as_slice() {
            [Value::Int(n), token, fence] => {
                let token = text(token).ok_or_else(|| unexpected("release", reply))?;
                let fence = text(fence)
                    .and_then(|f| f.parse::<u64>().ok())
                    .ok_or_else(|| unexpected("release", reply))?;
                Ok((*n, Some((token, fence))))
            }
            _ => Err(unexpected("release", reply)),
        },
        other => Err(unexpected("release", other)),
    }
}

/// What a release channel message says.
#[derive(Debug, PartialEq, Eq)]
enum Announced<'a> {
    /// `-<key>`: the lock was freed.
    Released(&'a str),
    /// `+<token>:<fence>:<key>`: the lock was handed over to a waiter (the
    /// waiter is known by its token).
    Handed { token: &'a str, fence: u64 },
}

fn parse_announcement(message: &[u8]) -> Option<Announced<'_>> {
    let message = std::str::from_utf8(message).ok()?;
    if let Some(key) = message.strip_prefix('-') {
        return Some(Announced::Released(key));
    }
    let mut parts = message.strip_prefix('+')?.splitn(3, ':');
    let token = parts.next()?;
    let fence = parts.next()?.parse().ok()?;
    parts.next().filter(|key| !key.is_empty())?;
    Some(Announced::Handed { token, fence })
}

/// `[value, pttl]`, or an empty array for a missing key. The value is
/// `<token>:<fence>:<metadata>`; anything else (another type, a foreign
/// string) is reported with empty metadata and token 0.
fn parse_holder(reply: &Value) -> Result<Option<LockInfo>, Error> {
    let Value::Array(items) = reply else {
        return Err(unexpected("holder", reply));
    };
    match items.as_slice() {
        [] => Ok(None),
        [value, Value::Int(pttl)] => {
            let value = text(value).ok_or_else(|| unexpected("holder", reply))?;
            let (fencing_token, metadata) = split_value(&value).unwrap_or((0, ""));
            Ok(Some(LockInfo {
                metadata: metadata.to_owned(),
                fencing_token,
                ttl: u64::try_from(*pttl).map_or(Duration::MAX, Duration::from_millis),
            }))
        }
        _ => Err(unexpected("holder", reply)),
    }
}

/// Splits a lock value into its fencing token and metadata.
fn split_value(value: &str) -> Option<(u64, &str)> {
    let mut parts = value.splitn(3, ':');
    let token = parts.next()?;
    let fence = parts.next()?.parse().ok()?;
    let meta = parts.next()?;
    (token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit())).then_some((fence, meta))
}

/// The clean-up after an acquire whose outcome is unknown: a plain EVAL of
/// the release script (a NOSCRIPT reply would silently skip it).
fn release_by_token(a: &Acquisition) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(&*scripts::RELEASE_SRC)
        .arg(a.redis_keys.len())
        .arg(&*a.redis_keys)
        .arg(a.token.as_str());
    cmd
}

#[cfg(test)]
mod model_vs_redis;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies() {
        let granted = parse_acquire(&Value::BulkString(b"1763712345000001".to_vec())).unwrap();
        assert!(matches!(
            granted,
            (Grant::Granted(1_763_712_345_000_001), 0)
        ));
        let busy = |pttl, counter| Value::Array(vec![Value::Int(pttl), Value::Int(counter)]);
        assert!(matches!(
            parse_acquire(&busy(250, 9)).unwrap(),
            (Grant::Busy(Some(d)), 9) if d == Duration::from_millis(250)
        ));
        assert!(matches!(
            parse_acquire(&busy(-1, 0)).unwrap(),
            (Grant::Busy(None), 0)
        ));
        assert!(parse_acquire(&Value::Nil).is_err());
        assert!(parse_acquire(&Value::Int(3)).is_err());
        assert!(parse_acquire(&Value::BulkString(b"x".to_vec())).is_err());
    }

    #[test]
    fn release_replies_and_announcements() {
        assert_eq!(parse_release(&Value::Int(1)).unwrap(), (1, None));
        let handed = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"abc".to_vec()),
            Value::BulkString(b"42".to_vec()),
        ]);
        assert_eq!(
            parse_release(&handed).unwrap(),
            (1, Some(("abc".to_owned(), 42)))
        );
        assert!(parse_release(&Value::Nil).is_err());
        assert_eq!(
            parse_announcement(b"-p:k"),
            Some(Announced::Released("p:k"))
        );
        assert_eq!(
            parse_announcement(b"+abc:42:p:k"),
            Some(Announced::Handed {
                token: "abc",
                fence: 42
            })
        );
        for bad in [&b"p:k"[..], b"+abc:x:k", b"+abc:1:", b"+abc", b"\xff"] {
            assert_eq!(parse_announcement(bad), None);
        }
    }

    #[test]
    fn errors_from_replies_never_show_a_token() {
        let token = "0123456789abcdef0123456789abcdef";
        let replies = [
            Value::Array(vec![
                Value::Int(1),
                Value::BulkString(token.as_bytes().to_vec()),
                Value::BulkString(b"not a number".to_vec()),
            ]),
            Value::BulkString(format!("{token}:1:m").into_bytes()),
            Value::SimpleString(token.to_owned()),
            Value::Array(vec![Value::BulkString(token.as_bytes().to_vec())]),
        ];
        for reply in &replies {
            for e in [
                parse_release(reply).err(),
                parse_acquire(reply).err(),
                parse_holder(reply).err(),
                int_reply(reply, "renew").err(),
            ]
            .into_iter()
            .flatten()
            {
                let text = format!("{e} {e:?} {:?}", std::error::Error::source(&e));
                assert!(!text.contains(token), "{text}");
                assert!(!text.contains("0123456789abcdef"), "{text}");
            }
        }
    }

    #[test]
    fn holder_replies() {
        assert_eq!(parse_holder(&Value::Array(vec![])).unwrap(), None);
        let token = "0123456789abcdef0123456789abcdef";
        let info = parse_holder(&Value::Array(vec![
            Value::BulkString(format!("{token}:42:host:1").into_bytes()),
            Value::Int(1500),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(info.metadata(), "host:1");
        assert_eq!(info.fencing_token(), 42);
        assert_eq!(info.ttl(), Duration::from_millis(1500));
        for foreign in ["", "not a lock", "short:1:m", &format!("{token}:x:m")] {
            let info = parse_holder(&Value::Array(vec![
                Value::BulkString(foreign.as_bytes().to_vec()),
                Value::Int(-1),
            ]))
            .unwrap()
            .unwrap();
            assert_eq!(
                (info.metadata(), info.fencing_token()),
                ("", 0),
                "{foreign}"
            );
            assert_eq!(info.ttl(), Duration::MAX);
        }
        assert!(parse_holder(&Value::Int(3)).is_err());
    }
}
