//! A request written on a pooled plain connection, its reply read later:
//! how one thread asks several servers at once (Redlock's masters), each
//! request written before any reply is read, where a thread per server
//! would cost a thread's wake-up on every call.

use std::time::{Duration, Instant};

use r2d2::{ManageConnection, Pool, PooledConnection};
use redis::{ConnectionLike, RedisResult, Value};

use super::{after_op, as_plain, bound_io, done_with, TimeoutsSet};
use crate::Error;

/// A plain connection checked out of its pool (by
/// [`super::Connector::idle`]), nothing sent on it yet.
pub(crate) trait Idle: Send {
    /// Writes `request` on it, bounded by `io`, without reading the reply:
    /// that is [`Sent::reply`]'s. `checkout`, `undo`: as for
    /// [`super::Connector::run`]. A write that fails is done with at once,
    /// as an operation that failed (`undo` sent after an I/O error: part of
    /// the request may have been read).
    fn send(
        self: Box<Self>,
        checkout: Duration,
        io: Duration,
        request: &[u8],
        undo: Option<redis::Cmd>,
    ) -> Result<Box<dyn Sent>, Error>;
}

/// What reads a [`Sent`] request's reply: it gets the reply, and the
/// connection for a request that follows up on it (`EVAL` after
/// `NOSCRIPT`), bounded by the I/O timeout as [`super::Connector::run`]'s.
pub(crate) type Then<'a> =
    &'a mut dyn FnMut(RedisResult<Value>, &mut dyn ConnectionLike) -> Result<Value, Error>;

/// A request written by [`Idle::send`], its reply not read yet.
pub(crate) trait Sent: Send {
    /// Reads the reply, waiting at most until `deadline`, and hands it to
    /// `then`; then does with the connection what
    /// [`super::Connector::run`] does after an operation (settled after a
    /// timeout, dropped when closed, the undo sent after an I/O error).
    fn reply(self: Box<Self>, deadline: Instant, then: Then<'_>) -> Result<Value, Error>;
}

/// A connection of `pool`, idle then sent on.
struct Checked<M: ManageConnection> {
    pool: Pool<M>,
    conn: PooledConnection<M>,
    checkout: Duration,
    io: Duration,
    undo: Option<redis::Cmd>,
}

/// `conn`, of `pool`, as an [`Idle`] one.
pub(super) fn checked<M>(pool: Pool<M>, conn: PooledConnection<M>) -> Box<dyn Idle>
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    Box::new(Checked {
        pool,
        conn,
        checkout: Duration::ZERO,
        io: Duration::ZERO,
        undo: None,
    })
}

impl<M> Idle for Checked<M>
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    fn send(
        mut self: Box<Self>,
        checkout: Duration,
        io: Duration,
        request: &[u8],
        undo: Option<redis::Cmd>,
    ) -> Result<Box<dyn Sent>, Error> {
        (self.checkout, self.io, self.undo) = (checkout, io, undo);
        let written = bound_io(&mut self.conn, io).and_then(|()| match as_plain(&mut self.conn) {
            Some(plain) => Ok(plain.send_packed_command(request)?),
            None => Err(not_plain().into()),
        });
        match written {
            Ok(()) => Ok(self),
            Err(e) => Err(self
                .done(Err(e))
                .err()
                .unwrap_or_else(|| not_plain().into())),
        }
    }
}

impl<M> Sent for Checked<M>
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    fn reply(mut self: Box<Self>, deadline: Instant, then: Then<'_>) -> Result<Value, Error> {
        let reply = read_until(&mut self.conn, deadline, self.io);
        let result = then(reply, &mut *self.conn);
        (*self).done(result)
    }
}

impl<M> Checked<M>
where
    M: ManageConnection,
    M::Connection: ConnectionLike,
{
    /// Done with the connection after an operation that gave `result`.
    fn done(self, result: Result<Value, Error>) -> Result<Value, Error> {
        let Checked {
            pool,
            mut conn,
            checkout,
            io,
            undo,
        } = self;
        let done = after_op(&mut conn, result);
        done_with(&pool, conn, checkout, io, done, undo)
    }
}

/// Reads one reply on `conn`, waiting at most until `deadline` (at least a
/// millisecond, the least a socket timeout takes), then gives the
/// connection its read timeout `io` back. A RESP3 push is not a reply.
fn read_until<M: ManageConnection>(
    conn: &mut PooledConnection<M>,
    deadline: Instant,
    io: Duration,
) -> RedisResult<Value> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    let Some(plain) = as_plain(conn) else {
        return Err(not_plain());
    };
    let reply = plain.set_read_timeout(Some(left)).and_then(|()| loop {
        match plain.recv_response() {
            Ok(Value::Push { .. }) => continue,
            other => break other,
        }
    });
    if plain.set_read_timeout(Some(io)).is_err() {
        // Unknown: whoever uses it next sets them again.
        PooledConnection::extensions_mut(conn).remove::<TimeoutsSet>();
    }
    reply
}

fn not_plain() -> redis::RedisError {
    std::io::Error::other("not a plain connection").into()
}
