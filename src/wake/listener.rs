//! The release listener: one thread and one pooled connection per locker,
//! started by its first waiter and shared by all of them, subscribed to the
//! prefix's release channel. What it hears wakes the waiters registered in
//! [`waiters`](super::waiters). On a Redis Cluster, the listener keeps
//! sharded subscriptions instead, a connection per master with waiters (see
//! [`shards`](super::shards)).
//!
//! What it hears is told in [`announce`](super::announce).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use redis::ConnectionLike;

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::conn::{Connector, Lent};
use crate::wake::announce::{deliver, parts};
use crate::wake::shards::Shards;
use crate::wake::waiters::Signal;
use crate::Error;

/// How often an idle listener checks whether its locker still exists.
const IDLE: Duration = Duration::from_secs(1);

/// How long a listener that failed to start is not tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A locker's release listener, and the waiters it wakes.
pub(crate) struct Listener {
    /// The release channel, when releases are announced (see
    /// `Topology::announces`); `None` means waiters poll with their backoff.
    channel: Option<String>,
    state: Mutex<State>,
    changed: Condvar,
    waiters: Arc<Signal>,
    /// On a cluster, the sharded subscriptions.
    shards: Option<Arc<Shards>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Off,
    Starting,
    On,
    /// Not possible with this pool; waiters poll.
    Unsupported,
    /// Failed to start; not retried before this instant.
    Failed(Instant),
}

/// What the listener's thread hears.
enum Heard<'a> {
    /// The subscription is in place: releases from now on are heard.
    Subscribed,
    /// A message on the channel.
    Message(&'a [u8]),
    /// Nothing for a while: a chance to stop.
    Idle,
    /// The server refused the subscription (an ACL user without rights on
    /// the channel): the listener has stopped, and trying again is no use.
    Refused,
    /// The connection failed; the listener has stopped.
    Gone,
}

impl Listener {
    /// A listener on `channel` (one server), or with `sharded`
    /// subscriptions (a cluster), or neither (waiters poll).
    pub(crate) fn new(channel: Option<String>, sharded: bool) -> Self {
        let waiters = Arc::new(Signal::default());
        Listener {
            channel,
            state: Mutex::new(State::Off),
            changed: Condvar::new(),
            shards: sharded.then(|| Arc::new(Shards::new(Arc::clone(&waiters)))),
            waiters,
        }
    }

    /// The channel releases are announced on, if they are.
    pub(crate) fn channel(&self) -> Option<&str> {
        self.channel.as_deref()
    }

    /// The waiters this listener wakes.
    pub(crate) fn waiters(&self) -> &Signal {
        &self.waiters
    }

    /// On a cluster, makes sure this locker listens for releases in `slot`
    /// (see [`Shards::ensure`]); true when that has just come up.
    pub(crate) fn ensure_shard(
        &self,
        instance: Option<&Arc<dyn Connector>>,
        channel: &str,
        slot: u16,
        checkout: Duration,
        io: Duration,
    ) -> bool {
        match (&self.shards, instance) {
            (Some(shards), Some(instance)) => shards.ensure(instance, channel, slot, checkout, io),
            _ => false,
        }
    }

    /// Makes sure this locker listens for releases, on a connection lent
    /// by `instance`. Returns true when the listener has just come up: a
    /// release may have slipped by before it did, so the caller should try
    /// again at once rather than wait. Waits at most `checkout` + `io`.
    pub(crate) fn ensure(
        self: &Arc<Self>,
        instance: Option<&Arc<dyn Connector>>,
        checkout: Duration,
        io: Duration,
    ) -> bool {
        let Some(channel) = &self.channel else {
            return false;
        };
        let mut state = self.state.lock();
        match *state {
            State::On | State::Unsupported => return false,
            State::Failed(until) if Instant::now() < until => return false,
            State::Starting => return self.await_start(&mut state, io),
            State::Off | State::Failed(_) => *state = State::Starting,
        }
        drop(state);
        let started = match instance.map(|i| i.lend(checkout)) {
            Some(Ok(Some(conn))) => self.spawn(conn, channel.clone(), io).map(|()| true),
            Some(Ok(None)) | None => Ok(false),
            Some(Err(e)) => Err(e),
        };
        let mut state = self.state.lock();
        match started {
            // Wait (bounded) for the subscription, so that a release from
            // now on is heard.
            Ok(true) => return self.await_start(&mut state, io),
            Ok(false) => {
                log::info!(
                    target: "redmutex::listen",
                    "this pool lends no connection for a release listener (fewer than {} \
                     connections, or not plain redis-rs ones): waiters poll with their \
                     backoff", crate::defaults::MIN_POOL_FOR_LISTENER
                );
                *state = State::Unsupported;
            }
            Err(e) => {
                log::warn!(
                    target: "redmutex::listen",
                    "the release listener could not start ({e}): waiters poll with their \
                     backoff, and it is tried again in {RETRY_AFTER:?}"
                );
                *state = State::Failed(Instant::now() + RETRY_AFTER);
            }
        }
        self.changed.notify_all();
        false
    }

    /// Waits (at most `io`) while the listener is starting, and says
    /// whether it came up. One that does not come up in time counts as
    /// failed for a second, so waiters do not queue behind it.
    fn await_start(&self, state: &mut MutexGuard<'_, State>, io: Duration) -> bool {
        let deadline = Instant::now() + io;
        while **state == State::Starting {
            if self.changed.wait_until(state, deadline).timed_out() {
                if **state == State::Starting {
                    **state = State::Failed(Instant::now() + RETRY_AFTER);
                    self.changed.notify_all();
                }
                break;
            }
        }
        **state == State::On
    }

    fn set(&self, to: State) {
        *self.state.lock() = to;
        self.changed.notify_all();
    }

    /// Subscribes to `channel` on `conn` on a thread of its own, and hands
    /// what it hears to [`hear`] until that says stop (the locker is gone)
    /// or the connection fails. The connection then goes back to the pool
    /// with the locker's I/O timeout.
    fn spawn(
        self: &Arc<Self>,
        mut conn: Box<dyn Lent>,
        channel: String,
        io: Duration,
    ) -> Result<(), Error> {
        let me = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("redmutex-listener".into())
            .stack_size(128 * 1024)
            .spawn(move || {
                let Some(plain) = conn.plain() else {
                    return;
                };
                subscribe(plain, &channel, &mut |heard| hear(&me, heard));
                // Back to the pool as the other connections are.
                let _ = plain.set_read_timeout(Some(io));
            })
            .map_err(Error::Thread)?;
        Ok(())
    }
}

/// The listener thread's loop: `SUBSCRIBE`, then every message, each
/// reported to `on` until it returns false. Then the connection is made a
/// plain one again (see [`unsubscribed`]), since it goes back to the pool.
fn subscribe(plain: &mut redis::Connection, channel: &str, on: &mut dyn FnMut(Heard<'_>) -> bool) {
    listen(plain, channel, on);
    if plain.is_open() && !unsubscribed(plain) {
        // Still cut off: the server closes it when the link heals, before
        // it runs anything sent after; its next user may still read a late
        // reply first (an error for every reply the lock parses).
        let _ = plain.send_packed_command(&redis::cmd("QUIT").get_packed_command());
    }
}

/// How many times [`unsubscribed`] tries, each bounded by the read timeout.
const UNSUBSCRIBE_TRIES: u32 = 30;

/// Leaves `plain` unsubscribed with no reply pending, whatever happened
/// before: a `SUBSCRIBE` or an unsubscribe that timed out may still be
/// applied by the server when the link heals, and announcements then come
/// as replies to whatever is sent next. `UNSUBSCRIBE`, `PUNSUBSCRIBE` and a
/// `PING` with a word of its own go out together, and replies are read and
/// dropped until that word comes back: everything sent before has then been
/// answered. False when the connection closed or never answered.
fn unsubscribed(plain: &mut redis::Connection) -> bool {
    for attempt in 0..UNSUBSCRIBE_TRIES {
        if !plain.is_open() {
            return false;
        }
        let word = format!("redmutex-unsubscribed-{attempt}");
        let mut bytes = redis::cmd("UNSUBSCRIBE").get_packed_command();
        bytes.extend(redis::cmd("PUNSUBSCRIBE").get_packed_command());
        bytes.extend(redis::cmd("PING").arg(&word).get_packed_command());
        if plain.send_packed_command(&bytes).is_err() {
            continue;
        }
        loop {
            match plain.recv_response() {
                Ok(v) if is_echo(&v, &word) => return true,
                Err(e) if e.is_timeout() => break,
                Err(_) if !plain.is_open() => return false,
                _ => {}
            }
        }
    }
    false
}

/// Whether `v` is the reply to `PING word`: the word, or `["pong", word]`
/// on a connection still subscribed (RESP2).
fn is_echo(v: &redis::Value, word: &str) -> bool {
    let is_word =
        |v: &redis::Value| matches!(v, redis::Value::BulkString(b) if b == word.as_bytes());
    match v {
        redis::Value::Array(a) => a.len() == 2 && a.get(1).is_some_and(is_word),
        v => is_word(v),
    }
}

/// [`subscribe`]'s loop, leaving the connection as it is.
fn listen(plain: &mut redis::Connection, channel: &str, on: &mut dyn FnMut(Heard<'_>) -> bool) {
    if plain.set_read_timeout(Some(IDLE)).is_err() {
        on(Heard::Gone);
        return;
    }
    match confirm(plain, channel) {
        Confirmed::Yes => {}
        Confirmed::Refused => {
            on(Heard::Refused);
            return;
        }
        Confirmed::Gone => {
            on(Heard::Gone);
            return;
        }
    }
    let mut pubsub = plain.as_pubsub();
    if !on(Heard::Subscribed) {
        return;
    }
    loop {
        let go_on = match pubsub.get_message() {
            Ok(msg) => on(Heard::Message(msg.get_payload_bytes())),
            Err(e) if e.is_timeout() => on(Heard::Idle),
            Err(_) => {
                on(Heard::Gone);
                false
            }
        };
        if !go_on {
            break;
        }
    }
    // Dropping `pubsub` unsubscribes (bounded by the timeout).
}

/// What became of a `SUBSCRIBE`.
enum Confirmed {
    Yes,
    /// The server refused it (an error reply: no ACL rights on the channel).
    Refused,
    /// No answer within the read timeout, or the connection failed.
    Gone,
}

/// Sends `SUBSCRIBE channel` and reads what comes back until its
/// confirmation: a reply over RESP2, a push over RESP3 (`protocol=resp3`),
/// which a plain command's call never returns, since redis-rs skips pushes
/// while it waits for a reply. A refusal (NOPERM) comes back as an error,
/// where `PubSub::subscribe` would take it for the confirmation.
fn confirm(plain: &mut redis::Connection, channel: &str) -> Confirmed {
    let bytes = redis::cmd("SUBSCRIBE").arg(channel).get_packed_command();
    if plain.send_packed_command(&bytes).is_err() {
        return Confirmed::Gone;
    }
    loop {
        match plain.recv_response() {
            Ok(redis::Value::ServerError(_)) => return Confirmed::Refused,
            Ok(v) => {
                if is_subscribed(v, channel) {
                    return Confirmed::Yes;
                }
                // Anything else (another push) is not for us.
            }
            Err(e) if e.is_io_error() || !plain.is_open() => return Confirmed::Gone,
            Err(_) => return Confirmed::Refused,
        }
    }
}

/// Whether `v` confirms a subscription to `channel`: `["subscribe",
/// channel, n]`, as a RESP2 reply or a RESP3 push.
fn is_subscribed(v: redis::Value, channel: &str) -> bool {
    use redis::Value::BulkString;
    matches!(parts(v).as_deref(), Some([BulkString(kind), BulkString(c), ..])
        if kind == b"subscribe" && c == channel.as_bytes())
}

/// The listener's callback: wakes the waiters of a released key; stops
/// when the locker is gone.
fn hear(listener: &Weak<Listener>, heard: Heard<'_>) -> bool {
    let Some(listener) = listener.upgrade() else {
        return false;
    };
    match heard {
        Heard::Subscribed => {
            log::debug!(target: "redmutex::listen", "release listener started");
            listener.set(State::On);
        }
        Heard::Message(message) => deliver(&listener.waiters, message),
        Heard::Idle => {}
        Heard::Refused => {
            log::warn!(
                target: "redmutex::listen",
                "the server refused to subscribe to the release channel (no ACL rights on it?): \
                 waiters of this locker poll with their backoff instead of being woken"
            );
            listener.set(State::Unsupported);
            return false;
        }
        Heard::Gone => {
            log::debug!(
                target: "redmutex::listen",
                "release listener stopped (connection lost): the next waiter starts another"
            );
            listener.set(State::Off);
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `SUBSCRIBE` whose confirmation does not come back in time (a
    /// partition): the server may still subscribe the connection once the
    /// link heals. The connection must come back plain, with no reply
    /// pending: the pool hands it to the lock's commands next. (Before,
    /// their replies were release announcements, or a refusal to run
    /// commands in a subscribed context: a failed unlock with no fault
    /// under way, in the fault suite's blackhole scenario.)
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_subscribe_cut_short_leaves_a_plain_connection() {
        use redmutex_testkit::proxy::{Mode, Proxy};
        let server =
            redmutex_testkit::ThrowAwayServer::start(&[], Duration::from_secs(20)).unwrap();
        let proxy = Proxy::start(server.port());
        let mut plain = redis::Client::open(proxy.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut direct = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        proxy.set(Mode::StallReplies);
        let mut heard = Vec::new();
        let mut on = |h: Heard<'_>| {
            heard.push(matches!(h, Heard::Gone));
            true
        };
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                // The server subscribes it; the confirmation stalls.
                await_subscribers(&mut direct, "chan", 1);
                let _: i64 = redis::cmd("PUBLISH")
                    .arg("chan")
                    .arg("-k")
                    .query(&mut direct)
                    .unwrap();
                // The link heals once the listener gave up and unsubscribed
                // (requests still pass), or after a while if it never does.
                await_subscribers(&mut direct, "chan", 0);
                proxy.set(Mode::Pass);
            });
            subscribe(&mut plain, "chan", &mut on);
            t.join().unwrap();
        });
        assert_eq!(
            heard,
            vec![true],
            "the listener stops, as for a lost connection"
        );
        proxy.set(Mode::Pass);
        let _ = plain.set_read_timeout(Some(Duration::from_secs(5)));
        let pong: redis::RedisResult<String> = redis::cmd("PING").query(&mut plain);
        assert_eq!(pong.ok().as_deref(), Some("PONG"));
        let got: redis::RedisResult<Option<String>> =
            redis::cmd("GET").arg("nothing").query(&mut plain);
        assert!(matches!(got, Ok(None)), "{got:?}");
    }

    #[test]
    fn a_subscription_is_confirmed_by_a_reply_or_a_push() {
        use redis::Value::{Array, BulkString, Int, Push};
        let word = |w: &str| BulkString(w.as_bytes().to_vec());
        let resp2 = Array(vec![word("subscribe"), word("chan"), Int(1)]);
        let resp3 = Push {
            kind: redis::PushKind::Subscribe,
            data: vec![word("chan"), Int(1)],
        };
        assert!(is_subscribed(resp2.clone(), "chan") && is_subscribed(resp3, "chan"));
        let message = Push {
            kind: redis::PushKind::Message,
            data: vec![word("chan"), word("-k")],
        };
        for not in [
            message,
            word("chan"),
            Array(vec![word("subscribe"), word("other")]),
        ] {
            assert!(!is_subscribed(not.clone(), "chan"), "{not:?}");
        }
        assert!(!is_subscribed(resp2, "other"));
    }

    /// Until `channel` has `n` subscribers on the server, for at most 10 s.
    #[allow(clippy::unwrap_used)]
    fn await_subscribers(direct: &mut redis::Connection, channel: &str, n: i64) {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query(direct)
                .unwrap();
            if counts.first().is_some_and(|(_, c)| *c == n) || Instant::now() > until {
                return;
            }
            std::thread::yield_now();
        }
    }
}
