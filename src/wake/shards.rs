//! The release listener on a Redis Cluster: sharded pub/sub. The scripts
//! announce a release with `SPUBLISH` on the shard channel of the lock's
//! slot (`protocol::keys`), so the message stays on the shard that owns the
//! slot and never crosses the cluster bus. Here, one thread and one plain
//! connection of its own per slot that has waiters, `SSUBSCRIBE`d to that
//! slot's channel on the master that serves it:
//!
//! - opened by the slot's first waiter ([`Shards::ensure`]), which
//!   waits (at most the I/O timeout) until it is subscribed;
//! - closed once no waiter of this locker waits for a key in the slot (it
//!   looks every [`IDLE`]) or the locker is gone;
//! - moved when the slot moves: a `MOVED` reply to `SSUBSCRIBE` is
//!   followed; when the server drops the subscription (`sunsubscribe`
//!   after a resharding or a failover took the slot from that node) or the
//!   node fails, the thread finds the slot's master again (`CLUSTER SLOTS`
//!   through the pool), subscribes there, and then wakes every waiter of
//!   the locker once, since a release may have gone unheard meanwhile.
//!   Until then, waiters poll with their backoff.
//!
//! A server before 7.0 has no `SSUBSCRIBE` (and its scripts' `SPUBLISH`
//! fails quietly): the locker's waiters poll with their backoff, said once
//! in a log event at `info`.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use redis::Value;

use crate::conn::nodes::Node;
use crate::conn::Connector;
use crate::protocol::slots;
use crate::wake::announce::deliver;
use crate::wake::waiters::Signal;

/// How often an idle subscription checks that it is still wanted and still
/// in place.
const IDLE: Duration = Duration::from_secs(1);

/// The word of the `PING` sent after a read timed out (see [`listen`]).
const TICK: &str = "redmutex-tick";

/// The pause before subscribing again after a subscription was lost.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A locker's sharded subscriptions. Their threads hold it weakly: they
/// stop when the locker's listener is gone.
pub(crate) struct Shards {
    state: Mutex<Subs>,
    changed: Condvar,
    /// The locker's waiters, which the announcements wake.
    waiters: Arc<Signal>,
}

#[derive(Default)]
struct Subs {
    /// Shard channel -> the state of its subscription, while it has a
    /// thread.
    channels: HashMap<String, Sub>,
    /// Sharded pub/sub is not possible here (a server before 7.0, an ACL
    /// user without rights on the channels): waiters poll.
    unsupported: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    /// Its thread subscribes for the first time.
    Starting,
    /// Subscribed: releases in the slot are heard.
    On,
    /// Lost (the slot moved, the node failed, or the first subscription
    /// took too long): its thread subscribes again; waiters poll meanwhile.
    Moving,
}

/// How one subscription ended.
enum Ended {
    /// The locker is gone, or nobody waits in the slot any more.
    Stop,
    /// `SSUBSCRIBE` was answered with `MOVED`: the slot is served there.
    Moved(Node),
    /// The subscription or its connection was lost, or never came up.
    Lost,
    /// The server refused `SSUBSCRIBE` itself (unknown before 7.0, or no
    /// ACL rights): no use trying again.
    Refused(redis::RedisError),
}

impl Shards {
    pub(crate) fn new(waiters: Arc<Signal>) -> Self {
        Shards {
            state: Mutex::default(),
            changed: Condvar::new(),
            waiters,
        }
    }

    /// Makes sure this locker listens for releases in `slot`, on its shard
    /// `channel`. Returns true when the subscription has just come up: a
    /// release may have slipped by before it did, so the caller should try
    /// again at once rather than wait. Waits at most `io` for it (the
    /// thread asks the slot's master within `checkout + io`, then connects
    /// and subscribes within `io` each).
    pub(crate) fn ensure(
        self: &Arc<Self>,
        instance: &Arc<dyn Connector>,
        channel: &str,
        slot: u16,
        checkout: Duration,
        io: Duration,
    ) -> bool {
        let shards = self;
        let mut subs = shards.state.lock();
        if subs.unsupported {
            return false;
        }
        match subs.channels.get(channel) {
            Some(Sub::On | Sub::Moving) => return false,
            Some(Sub::Starting) => return shards.await_start(&mut subs, channel, io),
            None => {
                subs.channels.insert(channel.to_owned(), Sub::Starting);
            }
        }
        drop(subs);
        let (me, instance, owned) = (
            Arc::downgrade(self),
            Arc::clone(instance),
            channel.to_owned(),
        );
        let spawned = std::thread::Builder::new()
            .name("redmutex-shard-listener".into())
            .stack_size(128 * 1024)
            .spawn(move || run(&me, &*instance, &owned, slot, checkout, io));
        let mut subs = shards.state.lock();
        if let Err(e) = spawned {
            log::warn!(
                target: "redmutex::listen",
                "the release listener of a slot could not start ({e}): its waiters poll with \
                 their backoff"
            );
            subs.channels.remove(channel);
            shards.changed.notify_all();
            return false;
        }
        shards.await_start(&mut subs, channel, io)
    }

    /// Waits (at most `io`) while `channel`'s first subscription is under
    /// way, and says whether it came up. One that does not come up in time
    /// counts as moving: its thread goes on, and wakes the waiters once it
    /// is subscribed.
    fn await_start(&self, subs: &mut MutexGuard<'_, Subs>, channel: &str, io: Duration) -> bool {
        let deadline = Instant::now() + io;
        while subs.channels.get(channel) == Some(&Sub::Starting) {
            if self.changed.wait_until(subs, deadline).timed_out() {
                if let Some(sub @ Sub::Starting) = subs.channels.get_mut(channel) {
                    *sub = Sub::Moving;
                }
                break;
            }
        }
        subs.channels.get(channel) == Some(&Sub::On)
    }

    /// Sets `channel`'s state, and returns the one before.
    fn set(&self, channel: &str, to: Option<Sub>) -> Option<Sub> {
        let mut subs = self.state.lock();
        let before = match to {
            Some(to) => subs.channels.insert(channel.to_owned(), to),
            None => subs.channels.remove(channel),
        };
        self.changed.notify_all();
        before
    }

    /// Waits `pause` (a wait on the condition variable, never a sleep).
    fn pause(&self, pause: Duration) {
        let until = Instant::now() + pause;
        let mut subs = self.state.lock();
        while !self.changed.wait_until(&mut subs, until).timed_out() {}
    }
}

/// The shards of `me`, while the locker exists and has a waiter for a key
/// in `slot`; else `channel`'s subscription is over, and is forgotten in
/// the same step (under the lock [`Shards::ensure`] takes after a waiter
/// registers: so a waiter that came just now finds no subscription, and
/// starts one).
fn wanted(me: &Weak<Shards>, channel: &str, slot: u16) -> Option<Arc<Shards>> {
    let shards = me.upgrade()?;
    let mut subs = shards.state.lock();
    if shards.waiters.watches(|key| slots::slot(key) == slot) {
        drop(subs);
        return Some(shards);
    }
    subs.channels.remove(channel);
    shards.changed.notify_all();
    drop(subs);
    None
}

/// A slot's listener thread: subscribes at the slot's master, follows the
/// slot when it moves, until nobody waits in it or the locker is gone.
fn run(
    me: &Weak<Shards>,
    instance: &dyn Connector,
    channel: &str,
    slot: u16,
    checkout: Duration,
    io: Duration,
) {
    let mut redirect: Option<Node> = None;
    // Two redirections in a row (a slot in the middle of a move) wait
    // before the next try, as a lost subscription does.
    let mut redirected = false;
    loop {
        if wanted(me, channel, slot).is_none() {
            return;
        }
        let node = match redirect.take() {
            Some(node) => Some(node),
            None => instance.master_of(slot, checkout, io).ok().flatten(),
        };
        let ended = match node.map(|n| n.connect(io)) {
            Some(Ok(conn)) => listen(me, conn, channel, slot, io),
            Some(Err(_)) | None => Ended::Lost,
        };
        let Some(shards) = me.upgrade() else {
            return;
        };
        let pause = match ended {
            Ended::Stop => return,
            Ended::Moved(node) => {
                redirect = Some(node);
                std::mem::replace(&mut redirected, true)
            }
            Ended::Lost => {
                log::debug!(
                    target: "redmutex::listen",
                    "a slot's release subscription was lost (its slot moved or its node \
                     failed): subscribing again where the slot is served"
                );
                redirected = false;
                true
            }
            Ended::Refused(e) => {
                log::info!(
                    target: "redmutex::listen",
                    "this cluster refuses sharded pub/sub ({}: Redis before 7.0, or no ACL \
                     rights on the release channels): waiters poll with their backoff",
                    e.code().unwrap_or("an error")
                );
                let mut subs = shards.state.lock();
                subs.unsupported = true;
                subs.channels.remove(channel);
                shards.changed.notify_all();
                return;
            }
        };
        shards.set(channel, Some(Sub::Moving));
        if pause {
            shards.pause(RETRY_AFTER);
        }
    }
}

/// One subscription: `SSUBSCRIBE` on `conn`, then every message heard,
/// until it ends. The connection closes when it is dropped.
fn listen(
    me: &Weak<Shards>,
    mut conn: redis::Connection,
    channel: &str,
    slot: u16,
    io: Duration,
) -> Ended {
    if conn.set_read_timeout(Some(io)).is_err() || conn.set_write_timeout(Some(io)).is_err() {
        return Ended::Lost;
    }
    match redis::cmd("SSUBSCRIBE")
        .arg(channel)
        .query::<Value>(&mut conn)
    {
        Ok(_) => {}
        Err(e) => {
            return match e.redirect_node().and_then(|(addr, _)| Node::parse(addr)) {
                Some(node) => Ended::Moved(node),
                None if e.is_io_error() => Ended::Lost,
                None => Ended::Refused(e),
            }
        }
    }
    if conn.set_read_timeout(Some(IDLE)).is_err() {
        return Ended::Lost;
    }
    {
        let Some(shards) = me.upgrade() else {
            return Ended::Stop;
        };
        log::debug!(target: "redmutex::listen", "a slot's release subscription is up");
        if shards.set(channel, Some(Sub::On)) != Some(Sub::Starting) {
            // Subscribed again: a release may have gone unheard meanwhile.
            shards.waiters.wake_all();
        }
    }
    loop {
        match conn.recv_response() {
            Ok(Value::Array(parts)) => match (parts.first(), parts.get(2)) {
                (Some(Value::BulkString(kind)), Some(Value::BulkString(message)))
                    if kind == b"smessage" =>
                {
                    let Some(shards) = me.upgrade() else {
                        return Ended::Stop;
                    };
                    deliver(&shards.waiters, message);
                }
                (Some(Value::BulkString(kind)), None)
                    if kind == b"pong"
                        && matches!(parts.get(1), Some(Value::BulkString(w)) if w == TICK.as_bytes()) =>
                {
                    if let Some(shards) = me.upgrade() {
                        shards.waiters.wake_all();
                    }
                }
                // The server dropped the subscription: its slot has gone
                // to another node.
                (Some(Value::BulkString(kind)), _) if kind == b"sunsubscribe" => {
                    return Ended::Lost
                }
                _ => {}
            },
            Ok(_) => {}
            Err(e) if e.is_timeout() => {
                if wanted(me, channel, slot).is_none() {
                    return Ended::Stop;
                }
                // A read that timed out makes redis-rs drop the next value
                // it reads (as a late reply): a `PING` goes first, so that
                // its answer is that value; if the answer shows up, what was
                // dropped came before it, maybe an announcement, and every
                // waiter tries again at once.
                let mut again = redis::cmd("PING").arg(TICK).get_packed_command();
                // Still subscribed here? A node that lost the slot (to a
                // failover) may drop the subscription without a word; it
                // answers `MOVED` to this, and the subscription follows.
                again.extend(redis::cmd("SSUBSCRIBE").arg(channel).get_packed_command());
                if conn.send_packed_command(&again).is_err() {
                    return Ended::Lost;
                }
            }
            Err(e) => {
                return match e.redirect_node().and_then(|(addr, _)| Node::parse(addr)) {
                    Some(node) => Ended::Moved(node),
                    None => Ended::Lost,
                }
            }
        }
    }
}
