//! The release listener on a Redis Cluster: sharded pub/sub. The scripts
//! announce a release with `SPUBLISH` on the shard channel of the lock's
//! slot (`protocol::keys`), so the message stays on the shard that owns the
//! slot: it is never broadcast over the cluster bus (only the shard's own
//! replicas get a copy over it, from Redis). Here, one thread and one plain
//! connection of its own per master (shard) that serves a slot with
//! waiters, `SSUBSCRIBE`d there to those slots' channels:
//!
//! - a slot's channel is added by its first waiter ([`Shards::ensure`]),
//!   which waits (at most the I/O timeout) until it is subscribed; a
//!   master's connection is opened with its first channel, and its thread
//!   told of the next ones by an empty message on a channel it already
//!   hears (one round trip), since it may be blocked reading;
//! - a channel is dropped once no waiter of this locker waits for a key in
//!   its slot (looked at every [`IDLE`]), and the connection is closed with
//!   its last channel, or when the locker is gone;
//! - a channel moves when its slot moves: a `MOVED` reply is followed; when
//!   the server drops the subscription (`sunsubscribe` after a resharding or
//!   a failover took the slot from that node; a demoted master may say
//!   nothing, so every idle second the thread sends its `SSUBSCRIBE`s again,
//!   which a node that lost the slot answers `MOVED` or `sunsubscribe`), or
//!   the node fails or answers none of that for the I/O timeout (a hung
//!   node, whose replica may have taken over), the slot's master is found again (`CLUSTER SLOTS`
//!   through the pool) and the channel subscribed there; then every waiter
//!   of the locker is woken once, since a release may have gone unheard
//!   meanwhile. Until then, waiters poll with their backoff.
//!
//! A server before 7.0 has no `SSUBSCRIBE` (and its scripts' `SPUBLISH`
//! fails quietly): the locker's waiters poll with their backoff, said once
//! in a log event at `info`.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use redis::{ConnectionLike, Value};

use crate::conn::nodes::Node;
use crate::conn::Connector;
use crate::protocol::slots;
use crate::wake::announce::{deliver, parts};
use crate::wake::waiters::Signal;

/// How often an idle connection checks that its channels are still wanted
/// and still in place.
const IDLE: Duration = Duration::from_secs(1);

/// The word of the `PING` sent after a read timed out (see [`NodeThread::idle`]).
const TICK: &str = "redmutex-tick";

/// The word of the `PING` that ends each idle second's commands: its answer
/// is never the value redis-rs drops, so a live node always answers
/// something (see [`NodeThread::idle`]).
const ALIVE: &str = "redmutex-alive";

/// The pause before trying a master again after its connection failed.
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
    /// Shard channel -> its slot and subscription, while wanted.
    channels: HashMap<String, Chan>,
    /// Master -> the channels its thread is to subscribe next; an entry
    /// while the master's thread runs.
    nodes: HashMap<Node, Vec<String>>,
    /// Sharded pub/sub is not possible here (a server before 7.0, an ACL
    /// user without rights on the channels): waiters poll.
    unsupported: bool,
}

/// A slot's channel.
#[derive(Debug, Clone)]
struct Chan {
    slot: u16,
    sub: Sub,
    /// The master it was given to, once it was.
    node: Option<Node>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    /// Subscribing for the first time.
    Starting,
    /// Subscribed: releases in the slot are heard.
    On,
    /// Lost (the slot moved, the node failed, or the first subscription
    /// took too long): subscribing again; waiters poll meanwhile.
    Moving,
}

/// What every master's thread shares.
#[derive(Clone)]
struct Ctx {
    me: Weak<Shards>,
    instance: Arc<dyn Connector>,
    checkout: Duration,
    io: Duration,
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
    /// again at once rather than wait. Takes at most `checkout + 2 * io`
    /// (the slot's master asked through the pool, then at most `io` for the
    /// subscription).
    pub(crate) fn ensure(
        self: &Arc<Self>,
        instance: &Arc<dyn Connector>,
        channel: &str,
        slot: u16,
        checkout: Duration,
        io: Duration,
    ) -> bool {
        {
            let mut subs = self.state.lock();
            if subs.unsupported {
                return false;
            }
            match subs.channels.get(channel).map(|c| c.sub) {
                Some(Sub::On | Sub::Moving) => return false,
                Some(Sub::Starting) => return self.await_start(&mut subs, channel, io),
                None => {
                    let chan = Chan {
                        slot,
                        sub: Sub::Starting,
                        node: None,
                    };
                    subs.channels.insert(channel.to_owned(), chan);
                }
            }
        }
        let ctx = Ctx {
            me: Arc::downgrade(self),
            instance: Arc::clone(instance),
            checkout,
            io,
        };
        match instance.master_of(slot, checkout, io) {
            Ok(Some(node)) => place(&ctx, self, node, channel),
            _ => {
                // Where the slot is cannot be told now: the next waiter
                // tries again.
                let mut subs = self.state.lock();
                subs.channels.remove(channel);
                self.changed.notify_all();
                return false;
            }
        }
        let mut subs = self.state.lock();
        self.await_start(&mut subs, channel, io)
    }

    /// Waits (at most `io`) while `channel`'s first subscription is under
    /// way, and says whether it came up. One that does not come up in time
    /// counts as moving: it goes on, and wakes the waiters once subscribed.
    fn await_start(&self, subs: &mut MutexGuard<'_, Subs>, channel: &str, io: Duration) -> bool {
        let deadline = Instant::now() + io;
        let sub = |subs: &Subs| subs.channels.get(channel).map(|c| c.sub);
        while sub(subs) == Some(Sub::Starting) {
            if self.changed.wait_until(subs, deadline).timed_out() {
                if let Some(chan) = subs.channels.get_mut(channel) {
                    if chan.sub == Sub::Starting {
                        chan.sub = Sub::Moving;
                    }
                }
                break;
            }
        }
        sub(subs) == Some(Sub::On)
    }

    /// Sets `channel`'s subscription, if it is still wanted, and returns
    /// the one before.
    fn set(&self, channel: &str, to: Sub) -> Option<Sub> {
        let mut subs = self.state.lock();
        let chan = subs.channels.get_mut(channel)?;
        let before = std::mem::replace(&mut chan.sub, to);
        self.changed.notify_all();
        Some(before)
    }

    /// Waits `pause` (a wait on the condition variable, never a sleep).
    fn pause(&self, pause: Duration) {
        let until = Instant::now() + pause;
        let mut subs = self.state.lock();
        while !self.changed.wait_until(&mut subs, until).timed_out() {}
    }
}

/// Gives `channel` to `node`'s thread (started if it has none), and wakes
/// that thread when it may be blocked reading.
fn place(ctx: &Ctx, shards: &Arc<Shards>, node: Node, channel: &str) {
    let mut subs = shards.state.lock();
    let Some(chan) = subs.channels.get_mut(channel) else {
        return;
    };
    chan.node = Some(node.clone());
    if let Some(pending) = subs.nodes.get_mut(&node) {
        pending.push(channel.to_owned());
        // A channel the thread hears: an empty message there wakes it.
        let poke = subs
            .channels
            .iter()
            .find(|(_, c)| c.sub == Sub::On && c.node.as_ref() == Some(&node))
            .map(|(name, _)| name.clone());
        drop(subs);
        if let Some(poke) = poke {
            let mut op = |c: &mut dyn ConnectionLike| {
                Ok(redis::cmd("SPUBLISH").arg(&poke).arg("").query(c)?)
            };
            let _ = ctx.instance.run(ctx.checkout, ctx.io, &mut op, None);
        }
        return;
    }
    subs.nodes.insert(node.clone(), vec![channel.to_owned()]);
    let thread_ctx = ctx.clone();
    let thread_node = node.clone();
    let spawned = std::thread::Builder::new()
        .name("redmutex-shard-listener".into())
        .stack_size(128 * 1024)
        .spawn(move || run(&thread_ctx, thread_node));
    if let Err(e) = spawned {
        log::warn!(
            target: "redmutex::listen",
            "a shard's release listener could not start ({e}): waiters poll with their backoff"
        );
        if let Some(lost) = subs.nodes.remove(&node) {
            for c in lost {
                subs.channels.remove(&c);
            }
        }
        shards.changed.notify_all();
    }
}

/// The shards of `ctx`, while the locker exists and has a waiter for a key
/// in `slot`; else `channel` is forgotten in the same step (under the lock
/// [`Shards::ensure`] takes after a waiter registers: so a waiter that came
/// just now finds no channel, and adds it again).
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

/// Finds where each of `lost` is served now and gives it there; returns
/// those that could not be placed (to try again later), and those the
/// cluster still places at `from` unless `here` allows that. Those no
/// longer wanted are forgotten.
fn relocate(ctx: &Ctx, from: &Node, lost: Vec<(String, u16)>, here: bool) -> Vec<(String, u16)> {
    let mut left = Vec::new();
    for (channel, slot) in lost {
        let Some(shards) = wanted(&ctx.me, &channel, slot) else {
            continue;
        };
        shards.set(&channel, Sub::Moving);
        match ctx.instance.master_of(slot, ctx.checkout, ctx.io) {
            Ok(Some(node)) if here || node != *from => place(ctx, &shards, node, &channel),
            _ => left.push((channel, slot)),
        }
    }
    left
}

/// A master's thread: connects, subscribes its channels, hears them, until
/// it has none left or the locker is gone; when the connection fails, its
/// channels go where their slots are served then.
fn run(ctx: &Ctx, node: Node) {
    let connected = node.connect(ctx.io).and_then(|conn| {
        conn.set_read_timeout(Some(IDLE))?;
        conn.set_write_timeout(Some(ctx.io))?;
        Ok(conn)
    });
    let mut thread = NodeThread {
        ctx,
        node: &node,
        mine: HashMap::new(),
        retry: Vec::new(),
        silent_since: None,
    };
    let lost = match connected {
        Ok(conn) => thread.serve(conn),
        Err(_) => Ended::Lost,
    };
    if let Ended::Done = lost {
        // Its entry is gone already (a new thread may have one now).
        return;
    }
    let Some(shards) = ctx.me.upgrade() else {
        return;
    };
    let mut lost_channels: Vec<(String, u16)> = thread.mine.drain().collect();
    lost_channels.append(&mut thread.retry);
    {
        let mut subs = shards.state.lock();
        for c in subs.nodes.remove(&node).unwrap_or_default() {
            if let Some(chan) = subs.channels.get(&c) {
                lost_channels.push((c, chan.slot));
            }
        }
        if let Ended::Refused = lost {
            subs.unsupported = true;
            for (c, _) in &lost_channels {
                subs.channels.remove(c);
            }
            shards.changed.notify_all();
            return;
        }
        shards.changed.notify_all();
    }
    if lost_channels.is_empty() {
        return;
    }
    log::debug!(
        target: "redmutex::listen",
        "a shard's release connection was lost: its channels go where their slots are served"
    );
    drop(shards);
    // Tried again until placed elsewhere or no longer wanted.
    loop {
        let left = relocate(ctx, &node, std::mem::take(&mut lost_channels), false);
        if left.is_empty() {
            return;
        }
        let Some(shards) = ctx.me.upgrade() else {
            return;
        };
        shards.pause(RETRY_AFTER);
        // The master itself again, if the cluster still names it.
        let mut again = Vec::new();
        for (c, slot) in left {
            match ctx.instance.master_of(slot, ctx.checkout, ctx.io) {
                Ok(Some(n)) if n == node => place(ctx, &shards, n, &c),
                _ => again.push((c, slot)),
            }
        }
        lost_channels = again;
        if lost_channels.is_empty() {
            return;
        }
    }
}

/// Whether `e`, a server's answer to `SSUBSCRIBE` or `PING`, says that
/// sharded pub/sub will never work on this connection: the command unknown
/// (before 7.0), a password wanted, or no ACL rights.
fn refusal(e: &redis::RedisError) -> bool {
    match e.code() {
        Some("NOAUTH" | "NOPERM" | "WRONGPASS") => true,
        Some("ERR") => e.to_string().contains("unknown command"),
        _ => false,
    }
}

/// How a master's connection ended.
enum Ended {
    /// No channel left, or the locker is gone.
    Done,
    /// The connection failed.
    Lost,
    /// The server refused `SSUBSCRIBE` itself (unknown before 7.0, or no
    /// ACL rights): no use trying again.
    Refused,
}

struct NodeThread<'a> {
    ctx: &'a Ctx,
    node: &'a Node,
    /// The channels subscribed (or being subscribed) here, with their slots.
    mine: HashMap<String, u16>,
    /// Channels lost here whose new master could not be found yet.
    retry: Vec<(String, u16)>,
    /// Since when the node has answered nothing sent in an idle second.
    silent_since: Option<Instant>,
}

impl NodeThread<'_> {
    fn serve(&mut self, mut conn: redis::Connection) -> Ended {
        loop {
            let Some(shards) = self.ctx.me.upgrade() else {
                return Ended::Done;
            };
            // The channels given to this master since the last look.
            let new: Vec<(String, u16)> = {
                let mut subs = shards.state.lock();
                let pending = subs
                    .nodes
                    .get_mut(self.node)
                    .map(std::mem::take)
                    .unwrap_or_default();
                if pending.is_empty() && self.mine.is_empty() && self.retry.is_empty() {
                    subs.nodes.remove(self.node);
                    return Ended::Done;
                }
                pending
                    .into_iter()
                    .filter_map(|c| subs.channels.get(&c).map(|chan| (c, chan.slot)))
                    .collect()
            };
            if !new.is_empty() {
                let mut bytes = Vec::new();
                for (c, slot) in new {
                    bytes.extend(redis::cmd("SSUBSCRIBE").arg(&c).get_packed_command());
                    self.mine.insert(c, slot);
                }
                if conn.send_packed_command(&bytes).is_err() {
                    return Ended::Lost;
                }
            }
            // redis-rs returns a server's error reply as a value: made an
            // error here, so that `MOVED` is followed and a refusal seen.
            let heard = conn.recv_response().and_then(|v| match v {
                Value::ServerError(e) => Err(e.into()),
                v => Ok(v),
            });
            if heard.is_ok() || heard.as_ref().is_err_and(|e| e.code().is_some()) {
                self.silent_since = None;
            }
            match heard {
                // A reply, or over RESP3 a push (messages, confirmations).
                Ok(v) => {
                    if let Some(parts) = parts(v) {
                        self.heard(&shards, &parts);
                    }
                }
                Err(e) if e.is_timeout() => {
                    drop(shards);
                    if !self.idle(&mut conn) {
                        return Ended::Lost;
                    }
                }
                Err(e) => {
                    if let Some((addr, slot)) = e.redirect_node() {
                        self.moved(&shards, addr, slot);
                    } else if e.is_io_error() || !conn.is_open() {
                        return Ended::Lost;
                    } else if refusal(&e) {
                        log::info!(
                            target: "redmutex::listen",
                            "this cluster refuses sharded pub/sub ({}: Redis before 7.0, no \
                             ACL rights on the release channels, or a password or TLS that a \
                             pool of a plain ClusterClient does not show: build it with \
                             redmutex::cluster_pool or ClusterManager): waiters poll with \
                             their backoff",
                            e.code().unwrap_or("an error")
                        );
                        return Ended::Refused;
                    } else {
                        // Passing (CLUSTERDOWN during a failover, TRYAGAIN,
                        // LOADING): the channels are placed again shortly.
                        return Ended::Lost;
                    }
                }
            }
        }
    }

    /// A message, or a reply, on the connection.
    fn heard(&mut self, shards: &Arc<Shards>, parts: &[Value]) {
        let text = |i: usize| match parts.get(i) {
            Some(Value::BulkString(b)) => Some(b.as_slice()),
            _ => None,
        };
        match text(0) {
            Some(b"smessage") => {
                if let Some(message) = text(2) {
                    deliver(&shards.waiters, message);
                }
            }
            Some(b"ssubscribe") => {
                let channel = text(1).and_then(|c| std::str::from_utf8(c).ok());
                if let Some(channel) = channel.filter(|c| self.mine.contains_key(*c)) {
                    if shards.set(channel, Sub::On) == Some(Sub::Moving) {
                        // Subscribed again: a release may have gone
                        // unheard meanwhile.
                        shards.waiters.wake_all();
                    }
                }
            }
            // The server dropped a subscription: its slot has gone to
            // another node.
            Some(b"sunsubscribe") => {
                let channel = text(1).and_then(|c| std::str::from_utf8(c).ok());
                if let Some((c, slot)) = channel.and_then(|c| self.mine.remove_entry(c)) {
                    let left = relocate(self.ctx, self.node, vec![(c, slot)], false);
                    self.retry.extend(left);
                }
            }
            // The answer to the `PING` after a timed-out read (see `idle`).
            Some(b"pong") if text(1) == Some(TICK.as_bytes()) => shards.waiters.wake_all(),
            _ => {}
        }
    }

    /// `MOVED` for the channel of `slot`: it goes to `addr`.
    fn moved(&mut self, shards: &Arc<Shards>, addr: &str, slot: u16) {
        let Some(channel) = self
            .mine
            .iter()
            .find(|(_, s)| **s == slot)
            .map(|(c, _)| c.clone())
        else {
            return;
        };
        self.mine.remove(&channel);
        shards.set(&channel, Sub::Moving);
        match Node::parse(addr, self.node) {
            Some(node) if node != *self.node => place(self.ctx, shards, node, &channel),
            _ => self.retry.push((channel, slot)),
        }
    }

    /// An idle second: channels no longer wanted are dropped, the others
    /// subscribed again (a node that lost a slot may have dropped it
    /// without a word), and lost ones placed again. False when the
    /// connection failed, or the node answered nothing of what the idle
    /// seconds sent for the I/O timeout (at least a second): a hung node,
    /// or a partition that drops packets, never fails the connection (the
    /// reads time out, the writes go into the socket buffer), and its
    /// replica may have taken its slots over meanwhile.
    fn idle(&mut self, conn: &mut redis::Connection) -> bool {
        match self.silent_since {
            Some(since) if since.elapsed() >= self.ctx.io.max(IDLE) => {
                log::debug!(
                    target: "redmutex::listen",
                    "a shard's node answered nothing for {:?}: its channels go where their \
                     slots are served",
                    since.elapsed()
                );
                return false;
            }
            Some(_) => {}
            None => self.silent_since = Some(Instant::now()),
        }
        let mine = std::mem::take(&mut self.mine);
        let mut unwanted = Vec::new();
        for (c, slot) in mine {
            if wanted(&self.ctx.me, &c, slot).is_some() {
                self.mine.insert(c, slot);
            } else {
                unwanted.push(c);
            }
        }
        // A read that timed out makes redis-rs drop the next value it
        // reads (as a late reply): the `PING` goes first, so that its
        // answer is that value; if the answer shows up, what was dropped
        // came before it, maybe an announcement, and every waiter tries
        // again at once.
        let mut bytes = redis::cmd("PING").arg(TICK).get_packed_command();
        for c in &unwanted {
            bytes.extend(redis::cmd("SUNSUBSCRIBE").arg(c).get_packed_command());
        }
        for c in self.mine.keys() {
            bytes.extend(redis::cmd("SSUBSCRIBE").arg(c).get_packed_command());
        }
        bytes.extend(redis::cmd("PING").arg(ALIVE).get_packed_command());
        if conn.send_packed_command(&bytes).is_err() {
            return false;
        }
        let retry = std::mem::take(&mut self.retry);
        self.retry = relocate(self.ctx, self.node, retry, true);
        true
    }
}
