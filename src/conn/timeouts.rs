//! The socket timeouts a call gives its pooled connection: the locker's
//! I/O timeout, and on a [`ClusterManager`]'s connection (whose client
//! tries a call twice at most) what keeps both tries within the call's
//! bound.

use std::any::{Any, TypeId};
use std::time::{Duration, Instant};

use r2d2::{ManageConnection, PooledConnection};

use super::{ClusterConnection, ClusterManager};
use crate::defaults::{CLUSTER_RETRIES, CLUSTER_RETRY_WAIT};
use crate::Error;

/// Remembers, in a pooled connection's extensions, the socket timeouts a
/// locker last gave it. Lockers that share a pool may have different I/O
/// timeouts, so the value is kept, not only the fact.
pub(super) struct TimeoutsSet(pub(super) Duration);

/// What is left of a call's bound, its `checkout` and `io` timeouts, since
/// it began at `start`.
pub(super) fn left_of(start: Instant, checkout: Duration, io: Duration) -> Duration {
    (checkout + io).saturating_sub(start.elapsed())
}

/// [`bound_io_within`] with no bound of a call's known: the I/O timeout.
pub(super) fn bound_io<M>(conn: &mut PooledConnection<M>, io: Duration) -> Result<(), Error>
where
    M: ManageConnection,
{
    bound_io_within(conn, io, Duration::MAX)
}

/// Gives a redis-rs connection (plain or cluster) the locker's socket
/// timeouts, so a pool built without [`SocketTimeouts`](super::SocketTimeouts) is bounded, and
/// each locker sharing a pool keeps its own bound whoever used the
/// connection before. One `setsockopt` pair (per node, on a cluster) only
/// when the connection's timeouts differ from the ones wanted: the pooled
/// connection's extensions remember the value last set.
///
/// The timeouts are `io`, but on a [`ClusterManager`]'s connection (whose
/// client tries a call twice at most, see [`per_try`]) what keeps both
/// tries within `left`, what is left of the call's bound. A plain
/// `ClusterClient` tries a call as often as it was built to (17 times by
/// default), each try within `io`.
pub(super) fn bound_io_within<M>(
    conn: &mut PooledConnection<M>,
    io: Duration,
    left: Duration,
) -> Result<(), Error>
where
    M: ManageConnection,
{
    let ours = TypeId::of::<M>() == TypeId::of::<ClusterManager>();
    let io = if ours { per_try(io, left) } else { io };
    if PooledConnection::extensions(conn)
        .get::<TimeoutsSet>()
        .is_some_and(|set| set.0 == io)
    {
        return Ok(());
    }
    // Unknown until both are set: a failure leaves them half changed.
    PooledConnection::extensions_mut(conn).remove::<TimeoutsSet>();
    let any: &mut dyn Any = &mut **conn;
    if let Some(plain) = any.downcast_mut::<redis::Connection>() {
        plain.set_read_timeout(Some(io))?;
        plain.set_write_timeout(Some(io))?;
    } else if let Some(cluster) = any.downcast_mut::<ClusterConnection>() {
        cluster.set_timeouts(io)?;
    } else if let Some(cluster) = any.downcast_mut::<redis::cluster::ClusterConnection>() {
        cluster.set_read_timeout(Some(io))?;
        cluster.set_write_timeout(Some(io))?;
    }
    PooledConnection::extensions_mut(conn).insert(TimeoutsSet(io));
    Ok(())
}

/// The socket timeouts of each try of a call on a [`ClusterManager`]'s
/// connection, with `left` of the call's bound: its client sends a call
/// that timed out (or was redirected) again once, after a pause of
/// `CLUSTER_RETRY_WAIT` at most, so both tries and the pause fit in
/// `left`; `io` at most, and in whole 10 ms, so that calls in a row find
/// the value set already (one `setsockopt` pair per node otherwise). With
/// equal checkout and I/O timeouts and a quick checkout, that is the I/O
/// timeout less 20 ms.
fn per_try(io: Duration, left: Duration) -> Duration {
    let tries = CLUSTER_RETRIES + 1;
    let share = left.saturating_sub(CLUSTER_RETRY_WAIT) / tries;
    let tens = u64::try_from(share.as_millis() / 10).unwrap_or(u64::MAX / 10);
    io.min(Duration::from_millis(tens * 10))
        .max(Duration::from_millis(1))
}
