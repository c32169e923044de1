//! Connections: the type-erased checkout the rest of the crate uses, the
//! connection kept aside for renewals, (in `pool.rs`) the pool a lock
//! needs with the customizer that bounds every socket call, and (in
//! `cluster.rs`) the manager of the Redis Cluster pools this crate builds.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use r2d2::{ManageConnection, Pool, PooledConnection};
use redis::ConnectionLike;

use crate::defaults::{MIN_POOL_FOR_LISTENER, MIN_POOL_FOR_SPARE};
use crate::Error;

mod cluster;
pub(crate) mod nodes;
mod pool;
mod sent;
mod timeouts;

pub(crate) use cluster::slot_moving;
pub use cluster::{ClusterConnection, ClusterManager};
pub(crate) use pool::builder;
pub use pool::{pool, pool_with, SocketTimeouts};
pub(crate) use sent::{Idle, Sent};
use timeouts::{bound_io, bound_io_within, left_of, TimeoutsSet};

/// An operation on one connection: what [`Connector::run`] runs.
pub(crate) type Op<'a> = &'a mut dyn FnMut(&mut dyn ConnectionLike) -> Result<redis::Value, Error>;

/// One Redis server (or cluster, or sentinel group) behind a pool, with the
/// pool's manager type erased so that `Locker` and `Guard` are not generic.
pub(crate) trait Connector: Send + Sync + 'static {
    /// Checks out a connection within `checkout` and runs `op` on it, so
    /// it returns within `checkout + io`. A plain connection that answers
    /// READONLY (a master demoted by a failover) is closed so the pool
    /// discards it instead of handing it out again. A connection on which
    /// `op` timed out is not used again until it has settled (see
    /// [`settle`]).
    ///
    /// `undo`: a command to run when `op` fails with an I/O error, because
    /// the server may have applied what `op` sent: on the same connection
    /// when it is still open (Redis then runs it after `op`'s command
    /// whenever that runs), on a fresh one when it was cut. It runs on a
    /// thread of its own, so the caller does not wait for it.
    fn run(
        &self,
        checkout: Duration,
        io: Duration,
        op: Op<'_>,
        undo: Option<redis::Cmd>,
    ) -> Result<redis::Value, Error>;

    /// Runs a renewal on the connection kept aside for renewals (see
    /// [`Connector::reserve`]), or, when another renewal has it, on an idle
    /// pooled connection beside it, so a pool left idle renews side by
    /// side. With neither, it waits, at most `checkout`: for the pool while
    /// other renewals of the locker hold some of it (they give it back
    /// within `io`), else for the spare, and past that takes an idle pooled
    /// connection only; so it still returns within `checkout + io`. An
    /// application that holds every other pooled connection cannot starve
    /// a lease this way: the renewals then take turns on the spare, one
    /// round trip each.
    /// When the spare is found closed, a fresh connection takes its place at
    /// once and the renewal is sent again on it, if the checkout timeout has
    /// not passed meanwhile; a pooled connection found closed in turn (a
    /// restart or `CLIENT KILL` cut them all) is dropped and the next one
    /// tried, within the same timeout; when a
    /// renewal on it times out, it leaves the slot to settle, and comes back
    /// to it once it answers again. With no spare, the connection checked
    /// out for the renewal (within what is left of `checkout`) becomes the
    /// spare. A pool of fewer than [`MIN_POOL_FOR_SPARE`] connections keeps
    /// none: its renewals run as [`Connector::run`] runs them.
    fn run_renewal(
        &self,
        checkout: Duration,
        io: Duration,
        op: Op<'_>,
    ) -> Result<redis::Value, Error>;

    /// Sets a connection aside for renewals, if none is and the pool has
    /// one idle and at least [`MIN_POOL_FOR_SPARE`] connections. Never waits.
    fn reserve(&self);

    /// A plain connection of the pool that is idle now, checked out without
    /// waiting, for a request whose reply is read later (see
    /// [`Idle::send`]): so one thread asks several servers at once. `None`
    /// when none is idle, or the pool's connections are not plain redis-rs
    /// ones (a cluster's).
    fn idle(&self) -> Option<Box<dyn Idle>>;

    /// Whether this is a Redis Cluster (keys of one script must share a slot).
    fn is_cluster(&self) -> bool;

    /// Takes a plain connection from the pool for good, within `checkout`,
    /// for the release listener (`wake::listener`). `Ok(None)`: not possible
    /// here (a cluster, a pool of fewer than [`MIN_POOL_FOR_LISTENER`]
    /// connections, or connections that are not plain redis-rs ones).
    fn lend(&self, checkout: Duration) -> Result<Option<Box<dyn Lent>>, Error>;

    /// On a cluster, the master that serves `slot` (`CLUSTER SLOTS` through
    /// the pool, within `checkout + io`), for the sharded release listener;
    /// `Ok(None)` elsewhere, or when the reply does not name it.
    fn master_of(
        &self,
        slot: u16,
        checkout: Duration,
        io: Duration,
    ) -> Result<Option<nodes::Node>, Error>;

    /// A short description for `Debug`.
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// A plain connection taken from the pool for good; it goes back to the
/// pool when dropped.
pub(crate) trait Lent: Send {
    /// The redis-rs connection.
    fn plain(&mut self) -> Option<&mut redis::Connection>;
}

impl<M: ManageConnection> Lent for PooledConnection<M> {
    fn plain(&mut self) -> Option<&mut redis::Connection> {
        as_plain(self)
    }
}

/// A user's pool, and the connection a locker keeps aside for renewals.
pub(crate) struct Pooled<M: ManageConnection> {
    pool: Pool<M>,
    /// Shared with the thread that settles the spare after a timeout.
    spare: Arc<Mutex<Option<PooledConnection<M>>>>,
    /// How many of the locker's renewals run on a pooled connection (not
    /// the spare) right now: those come back to the pool within the I/O
    /// timeout, so a renewal that finds the spare busy waits for the pool.
    borrowed: AtomicUsize,
}

/// The type-erased connector of a pool.
pub(crate) fn connector<M>(pool: Pool<M>) -> Arc<dyn Connector>
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    Arc::new(Pooled {
        pool,
        spare: Arc::new(Mutex::new(None)),
        borrowed: AtomicUsize::new(0),
    })
}

/// What became of a connection after an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Fit for the next operation.
    Fine,
    /// An operation timed out on it: a late reply, or a half-open
    /// connection (a failed-over master, a NAT that dropped its state),
    /// whose every later operation would time out too. Not to be used
    /// again before it has answered a `PING` (see [`settle`]).
    TimedOut,
    /// Closed, or to be closed: the pool drops it when it comes back.
    Closed,
}

/// Runs `op` on `conn`, bounded by `io` and by `left` (what is left of the
/// call's bound, its checkout and I/O timeouts, after the checkout; see
/// [`bound_io_within`]), and says what became of the connection. One that
/// reaches a master demoted by a failover (READONLY) is closed, so that the
/// pool discards it.
fn run_on_conn<M>(
    conn: &mut PooledConnection<M>,
    io: Duration,
    left: Duration,
    op: Op<'_>,
) -> (Result<redis::Value, Error>, After)
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    if let Err(e) = bound_io_within(conn, io, left) {
        return (Err(e), After::Closed);
    }
    let result = op(&mut **conn);
    after_op(conn, result)
}

/// What became of `conn` after an operation that gave `result`, with that
/// result (a server's refusal to run scripts made the typed error). One
/// that reached a master demoted by a failover (READONLY) is closed, so
/// that the pool discards it.
fn after_op<M>(
    conn: &mut PooledConnection<M>,
    result: Result<redis::Value, Error>,
) -> (Result<redis::Value, Error>, After)
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    let result = result.map_err(|e| match &e {
        Error::Redis(r) => crate::server::scripting_refused(r).unwrap_or(e),
        _ => e,
    });
    let mut after = After::Fine;
    if let Err(Error::Redis(e)) = &result {
        if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly) {
            discard_plain(conn);
            after = After::Closed;
        } else if e.is_timeout() {
            after = After::TimedOut;
        } else if e.is_io_error() {
            after = After::Closed;
        }
    }
    if !conn.is_open() {
        after = After::Closed;
    }
    (result, after)
}

/// How many `PING`s a settling connection gets (each bounded by the I/O
/// timeout) before it goes back to the pool anyway.
const SETTLE_PINGS: u32 = 30;

/// Takes a connection on which an operation timed out out of use, on a
/// thread of its own: runs `undo` on it first, if given, then sends `PING`
/// (each bounded by the connection's own timeouts) until one is answered
/// (redis-rs skips the late replies first) or the connection closes, at
/// most [`SETTLE_PINGS`] times. Then `home` gets it
/// back: the spare slot, or else the pool. Meanwhile the pool opens fresh
/// connections for the next operations. If no thread can be had, the
/// connection goes back to the pool at once.
fn settle<M>(
    mut conn: PooledConnection<M>,
    undo: Option<redis::Cmd>,
    home: Option<Arc<Mutex<Option<PooledConnection<M>>>>>,
) where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    let _ = std::thread::Builder::new()
        .name("redmutex-settle".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            if let Some(undo) = undo {
                let _ = undo.query::<redis::Value>(&mut *conn);
            }
            let mut answered = false;
            for _ in 0..SETTLE_PINGS {
                if !conn.is_open() {
                    return;
                }
                let pong = redis::cmd("PING").query::<String>(&mut *conn);
                if pong.is_ok_and(|p| p == "PONG") {
                    answered = true;
                    break;
                }
            }
            if let (true, Some(home)) = (answered, home) {
                let mut slot = home.lock();
                if slot.is_none() {
                    *slot = Some(conn);
                }
            }
        });
}

/// After an operation on `conn` (of `pool`) that gave `result` and left
/// the connection so (`after`): the connection settled or dropped as that
/// says, `undo` sent after an I/O error (see [`Connector::run`]).
fn done_with<M>(
    pool: &Pool<M>,
    conn: PooledConnection<M>,
    checkout: Duration,
    io: Duration,
    (result, after): (Result<redis::Value, Error>, After),
    undo: Option<redis::Cmd>,
) -> Result<redis::Value, Error>
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    let undo = undo.filter(|_| matches!(&result, Err(Error::Redis(e)) if e.is_io_error()));
    match after {
        After::Fine => {}
        After::TimedOut => settle(conn, undo, None),
        After::Closed => {
            if let Some(undo) = undo {
                undo_on_fresh(pool, checkout, io, undo);
            }
        }
    }
    result
}

/// Runs `undo` on a fresh connection, on a thread of its own (the one the
/// failed operation used was cut).
fn undo_on_fresh<M>(pool: &Pool<M>, checkout: Duration, io: Duration, undo: redis::Cmd)
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    let pool = pool.clone();
    let _ = std::thread::Builder::new()
        .name("redmutex-undo".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let start = Instant::now();
            if let Ok(mut conn) = pool.get_timeout(checkout) {
                let left = left_of(start, checkout, io);
                let (_, after) = run_on_conn(&mut conn, io, left, &mut |c| Ok(undo.query(c)?));
                if after == After::TimedOut {
                    settle(conn, None, None);
                }
            }
        });
}

impl<M> Connector for Pooled<M>
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    fn run(
        &self,
        checkout: Duration,
        io: Duration,
        op: Op<'_>,
        undo: Option<redis::Cmd>,
    ) -> Result<redis::Value, Error> {
        let start = Instant::now();
        let conn = self.pool.get_timeout(checkout)?;
        self.run_checked_out(conn, start, checkout, io, op, undo)
    }

    fn run_renewal(
        &self,
        checkout: Duration,
        io: Duration,
        op: Op<'_>,
    ) -> Result<redis::Value, Error> {
        if self.pool.max_size() < MIN_POOL_FOR_SPARE {
            return self.run(checkout, io, op, None);
        }
        let start = Instant::now();
        let slot = match self.spare.try_lock() {
            Some(slot) => slot,
            // Another renewal has the spare: an idle pooled connection
            // serves this one beside it. With none idle, it waits (within
            // the checkout timeout) for the pool while the locker's own
            // renewals hold some of it, as they give it back within the I/O
            // timeout; else, with an application holding the pool, for the
            // spare, and past that takes an idle connection only.
            None => {
                let conn = match self.pool.try_get() {
                    Some(conn) => conn,
                    None if self.borrowed.load(Ordering::SeqCst) > 0 => {
                        self.pool.get_timeout(checkout)?
                    }
                    None => match self.spare.try_lock_for(checkout) {
                        Some(slot) => return self.renew_on_spare(slot, start, checkout, io, op),
                        None => return self.run(Duration::ZERO, io, op, None),
                    },
                };
                self.borrowed.fetch_add(1, Ordering::SeqCst);
                let result = self.run_checked_out(conn, start, checkout, io, op, None);
                self.borrowed.fetch_sub(1, Ordering::SeqCst);
                return result;
            }
        };
        self.renew_on_spare(slot, start, checkout, io, op)
    }

    fn reserve(&self) {
        if self.pool.max_size() < MIN_POOL_FOR_SPARE {
            return;
        }
        if let Some(mut slot) = self.spare.try_lock() {
            if slot.is_none() {
                *slot = self.pool.try_get();
            }
        }
    }

    fn is_cluster(&self) -> bool {
        let m = TypeId::of::<M>();
        m == TypeId::of::<redis::cluster::ClusterClient>() || m == TypeId::of::<ClusterManager>()
    }

    fn idle(&self) -> Option<Box<dyn Idle>> {
        if TypeId::of::<M::Connection>() != TypeId::of::<redis::Connection>() {
            return None;
        }
        let conn = self.pool.try_get()?;
        Some(sent::checked(self.pool.clone(), conn))
    }

    fn lend(&self, checkout: Duration) -> Result<Option<Box<dyn Lent>>, Error> {
        if self.is_cluster() || self.pool.max_size() < MIN_POOL_FOR_LISTENER {
            return Ok(None);
        }
        let mut conn = self.pool.get_timeout(checkout)?;
        if as_plain(&mut conn).is_none() {
            return Ok(None);
        }
        // The listener changes its timeouts: whoever uses it next sets them.
        PooledConnection::extensions_mut(&mut conn).remove::<TimeoutsSet>();
        Ok(Some(Box::new(conn)))
    }

    fn master_of(
        &self,
        slot: u16,
        checkout: Duration,
        io: Duration,
    ) -> Result<Option<nodes::Node>, Error> {
        if !self.is_cluster() {
            return Ok(None);
        }
        let start = Instant::now();
        let mut conn = self.pool.get_timeout(checkout)?;
        // The nodes are reached as the pool reaches them, where it shows how.
        let any: &mut dyn Any = &mut *conn;
        let settings = any
            .downcast_mut::<ClusterConnection>()
            .map(|c| Arc::clone(c.node_settings()));
        let mut op =
            |c: &mut dyn ConnectionLike| Ok(redis::cmd("CLUSTER").arg("SLOTS").query(c)?);
        let slots = self.run_checked_out(conn, start, checkout, io, &mut op, None)?;
        Ok(nodes::master_of(&slots, slot).map(|node| node.with_settings(settings)))
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        write!(
            f,
            "Pool {{ connections: {}, idle: {}, max_size: {} }}",
            state.connections,
            state.idle_connections,
            self.pool.max_size()
        )
    }
}

impl<M> Pooled<M>
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    /// [`Connector::run`] past the checkout (which began at `start`): runs
    /// `op` on `conn`, and settles the connection, or sends `undo`, as that
    /// says.
    fn run_checked_out(
        &self,
        mut conn: PooledConnection<M>,
        start: Instant,
        checkout: Duration,
        io: Duration,
        op: Op<'_>,
        undo: Option<redis::Cmd>,
    ) -> Result<redis::Value, Error> {
        // A cluster pool of ours, whose client retries once, has a call
        // refused while its slot moves sent again within the call's bound.
        let ours = TypeId::of::<M>() == TypeId::of::<ClusterManager>();
        let mut refusals = 0;
        loop {
            let done = run_on_conn(&mut conn, io, left_of(start, checkout, io), op);
            let moving = matches!(&done, (Err(e), After::Fine) if cluster::slot_moving(e));
            if !(ours
                && moving
                && cluster::pause_for_slot(refusals, left_of(start, checkout, io), io))
            {
                return done_with(&self.pool, conn, checkout, io, done, undo);
            }
            refusals += 1;
        }
    }

    /// [`Connector::run_renewal`] once it has the spare's slot: on the
    /// spare, or else on a connection from the pool (within what is left of
    /// `checkout` since `start`), which becomes the spare.
    fn renew_on_spare(
        &self,
        mut slot: MutexGuard<'_, Option<PooledConnection<M>>>,
        start: Instant,
        checkout: Duration,
        io: Duration,
        op: Op<'_>,
    ) -> Result<redis::Value, Error> {
        let mut first = None;
        if let Some(mut conn) = slot.take() {
            let (result, after) = run_on_conn(&mut conn, io, left_of(start, checkout, io), op);
            match after {
                After::Fine => {
                    *slot = Some(conn);
                    return result;
                }
                // It comes back to the slot once it answers again; the
                // next renewal goes through the pool meanwhile.
                After::TimedOut => {
                    drop(slot);
                    settle(conn, None, Some(Arc::clone(&self.spare)));
                    return result;
                }
                // Back to the pool, which drops it as closed; its place in
                // the pool is taken again at once, before the application
                // takes it.
                After::Closed => first = Some(result),
            }
        }
        // Sent again only within the checkout timeout: a spare found closed
        // late in its wait has taken the time of a checkout already. A
        // connection found closed (EOF, reset, broken pipe: the server
        // restarted, or `CLIENT KILL` cut every client) is dropped, and its
        // idle siblings in the pool were most likely cut with it: each of
        // them fails at once and is dropped in turn, so the renewal takes
        // the next one, or a fresh one, while the checkout timeout lasts
        // (at most once per connection the pool can hold, and one more).
        // Every attempt starts within `checkout`, so it all ends within
        // `checkout + io`.
        let mut attempts = self.pool.max_size();
        loop {
            let left = checkout.saturating_sub(start.elapsed());
            if left.is_zero() {
                if let Some(first) = first.take() {
                    return first;
                }
            }
            let mut conn = match self.pool.get_timeout(left) {
                Ok(conn) => conn,
                Err(e) => return first.unwrap_or(Err(e.into())),
            };
            // A renewal is owner-checked: sending it again is safe.
            let (result, after) = run_on_conn(&mut conn, io, left_of(start, checkout, io), op);
            match after {
                After::Fine => *slot = Some(conn),
                After::TimedOut => {
                    drop(slot);
                    settle(conn, None, Some(Arc::clone(&self.spare)));
                }
                After::Closed
                    if attempts > 0 && !checkout.saturating_sub(start.elapsed()).is_zero() =>
                {
                    attempts -= 1;
                    first = Some(result);
                    continue;
                }
                After::Closed => {}
            }
            return result;
        }
    }
}

/// The pooled connection as a plain redis-rs one (single server or
/// Sentinel pools), if it is one.
fn as_plain<M>(conn: &mut PooledConnection<M>) -> Option<&mut redis::Connection>
where
    M: ManageConnection,
{
    let any: &mut dyn Any = &mut **conn;
    any.downcast_mut::<redis::Connection>()
}

/// Makes r2d2 drop a plain connection when it comes back: `QUIT` has the
/// server close it, and the next read sees the end of the stream, which
/// marks the connection closed (r2d2 checks that on return).
fn discard_plain<M>(conn: &mut PooledConnection<M>)
where
    M: ManageConnection,
{
    if let Some(plain) = as_plain(conn) {
        let _ = redis::cmd("QUIT").exec(plain);
        let _ = plain.check_connection();
    }
}
