//! The Redis Cluster pools this crate builds ([`cluster_pool`]): redis-rs's
//! cluster client, with one retry of its own at most, and beside it the
//! settings that a connection of the sharded release listener to one node
//! needs (user, password, TLS, protocol), which a `ClusterClient` keeps to
//! itself.
//!
//! [`cluster_pool`]: crate::cluster_pool

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use r2d2::ManageConnection;
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError};

use crate::defaults::{
    CLUSTER_CONNECT_TIMEOUT, CLUSTER_MOVING_PAUSE, CLUSTER_MOVING_PAUSE_MAX, CLUSTER_RETRIES,
    CLUSTER_RETRY_WAIT, DEFAULT_IO_TIMEOUT,
};
use crate::time::millis_ceil;
use crate::Error;

/// The most replies a connection's handshake waits for, one by one, each
/// within the connect timeout: `CLIENT SETINFO` twice, and `AUTH` or
/// `HELLO` (a password, RESP3).
const HANDSHAKE_REPLIES: u32 = 3;

/// Makes the connections of a Redis Cluster pool for a locker, as
/// [`cluster_pool`](crate::cluster_pool) builds it: redis-rs's
/// [`ClusterClient`] for the lock's commands, and the settings a
/// connection to one node needs (user, password, TLS and its certificates,
/// protocol) for the sharded release listener, which keeps a connection of
/// its own to each master that serves a slot with waiters. A
/// `ClusterClient` does not show its settings: through a pool of a plain
/// `ClusterClient`, the listener connects by the node's address alone, so
/// on a cluster that wants a password or TLS it is refused and waiters
/// poll with their backoff.
///
/// The client sends a call again by itself once at most (to follow a
/// `MOVED` or `ASK` redirection), pausing 20 ms at most before it, whatever
/// `builder` says: each of redis-rs's retries (16 by default) can cost an
/// I/O timeout, and the locker keeps every call within its checkout and
/// I/O timeouts by giving each of the two tries half of what is left. A
/// try on a pooled connection made while a node hung first connects to it,
/// which costs up to three times the connect timeout (one for each reply of
/// the handshake): so the client connects to a node within 600 ms, or a
/// third of a try of the shortest I/O timeout of the lockers that use the
/// pool (the connections made after they first ran), whatever `builder`
/// says. A redirection while another node hangs can cost more (the client
/// asks every node for the cluster's shape then).
///
/// While a slot moves (a resharding), the cluster refuses every script of
/// the lock on its keys (they name several keys, and Redis runs none of
/// those in a slot whose keys are split between two nodes: `TRYAGAIN`),
/// and a redirection can outlast the one retry (`MOVED`, `ASK`): the
/// locker then sends the call again itself, after 10 ms, doubling to
/// 160 ms, within the call's bound, while what is left of it gives each
/// try half the I/O timeout at least (a node that answers within the I/O
/// timeout never times a call sent again out). A wait ([`Locker::lock`],
/// [`Locker::lock_timeout`]) goes on through a longer migration, or a
/// `CLUSTERDOWN` while a master fails over, as through a busy lock (within
/// its wait, and for a TTL at most), and a renewal refused so is a failed
/// one, retried until the lease's deadline.
///
/// [`Locker::lock`]: crate::Locker::lock
/// [`Locker::lock_timeout`]: crate::Locker::lock_timeout
///
/// Build one yourself for settings that URLs do not carry, such as TLS
/// certificates of your own (the `tls` feature): `node` is any node's
/// connection info (its address is replaced by each node's).
///
/// ```no_run
/// use redis::IntoConnectionInfo;
/// let urls = ["redis://app:secret@10.0.0.1:7000/", "redis://app:secret@10.0.0.2:7000/"];
/// let client = redis::cluster::ClusterClient::builder(urls);
/// let manager = redmutex::ClusterManager::new(client, urls[0].into_connection_info()?)?;
/// let pool = redmutex::r2d2::Pool::builder()
///     .max_size(32)
///     .test_on_check_out(false)
///     .build(manager)?;
/// let locker = redmutex::Locker::new(pool);
/// # let _ = locker;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ClusterManager {
    client: ClusterClient,
    shared: Arc<Shared>,
}

/// What a manager and its connections share.
struct Shared {
    /// The settings a connection to one node needs.
    node: Arc<ConnectionInfo>,
    /// The connect timeout of the next connections, in ms.
    connect_ms: AtomicU64,
}

impl Shared {
    /// Has the next connections connect to a node (each of its handshake's
    /// replies) within a third of `per_try`, if that is shorter than now.
    fn connect_within(&self, per_try: Duration) {
        let within = millis_ceil(per_try / HANDSHAKE_REPLIES).max(1);
        self.connect_ms.fetch_min(within, Ordering::Relaxed);
    }
}

impl ClusterManager {
    /// A manager over the client `builder` makes (with one retry at most,
    /// see above), whose nodes the release listener reaches with `node`'s
    /// settings.
    ///
    /// ```no_run
    /// use redis::IntoConnectionInfo;
    /// let url = "redis://:secret@10.0.0.1:7000/";
    /// let manager = redmutex::ClusterManager::new(
    ///     redis::cluster::ClusterClient::builder([url]),
    ///     url.into_connection_info()?,
    /// )?;
    /// # let _ = manager;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidUrl`] when redis-rs refuses the client's settings
    /// (no node, nodes with different passwords or TLS modes).
    pub fn new(builder: ClusterClientBuilder, node: ConnectionInfo) -> Result<Self, Error> {
        // As `pool_with`: a `rediss://` node needs the crypto provider.
        #[cfg(feature = "tls")]
        super::pool::install_crypto_provider();
        let client = builder
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(1)
            .max_retry_wait(crate::time::millis_ceil(CLUSTER_RETRY_WAIT))
            .build()
            .map_err(|e| Error::InvalidUrl {
                reason: "redis-rs refused the nodes' URLs".to_owned(),
                source: Some(e),
            })?;
        Ok(ClusterManager {
            client,
            shared: Arc::new(Shared {
                node: Arc::new(node),
                connect_ms: AtomicU64::new(millis_ceil(CLUSTER_CONNECT_TIMEOUT)),
            }),
        })
    }
}

impl fmt::Debug for ClusterManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The node's settings hold the password: never shown.
        f.debug_struct("ClusterManager").finish_non_exhaustive()
    }
}

impl ManageConnection for ClusterManager {
    type Connection = ClusterConnection;
    type Error = RedisError;

    fn connect(&self) -> Result<ClusterConnection, RedisError> {
        let within = Duration::from_millis(self.shared.connect_ms.load(Ordering::Relaxed));
        // A response timeout while the connection is made (it asks every
        // node for the slots); each call sets its own.
        let config = ClusterConfig::new()
            .set_connection_timeout(within)
            .set_response_timeout(DEFAULT_IO_TIMEOUT);
        Ok(ClusterConnection {
            conn: self.client.get_connection_with_config(config)?,
            shared: Arc::clone(&self.shared),
        })
    }

    fn is_valid(&self, conn: &mut ClusterConnection) -> Result<(), RedisError> {
        redis::cmd("PING").exec(&mut conn.conn)
    }

    fn has_broken(&self, conn: &mut ClusterConnection) -> bool {
        !conn.conn.is_open()
    }
}

/// A pooled connection of a [`ClusterManager`]: redis-rs's
/// [`ClusterConnection`](redis::cluster::ClusterConnection) (it derefs to
/// it, and runs commands as it does), and the settings its nodes are
/// reached with.
///
/// ```no_run
/// let pool = redmutex::cluster_pool(["redis://10.0.0.1:7000/"])?;
/// let mut conn = pool.get()?;
/// let _: () = redis::cmd("SET").arg("greeting").arg("hello").query(&mut *conn)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ClusterConnection {
    conn: redis::cluster::ClusterConnection,
    shared: Arc<Shared>,
}

impl ClusterConnection {
    /// The settings a connection to one of its nodes needs.
    pub(crate) fn node_settings(&self) -> &Arc<ConnectionInfo> {
        &self.shared.node
    }

    /// Sets the read and write timeouts of every connection to a node to
    /// `per_try`, and has the manager's next connections connect to a node
    /// within a third of `first_try` (a call's first try, which a call sent
    /// again has less than), if that is shorter than now.
    pub(crate) fn set_timeouts(
        &self,
        per_try: Duration,
        first_try: Duration,
    ) -> Result<(), RedisError> {
        self.shared.connect_within(first_try);
        self.conn.set_read_timeout(Some(per_try))?;
        self.conn.set_write_timeout(Some(per_try))
    }
}

impl fmt::Debug for ClusterConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConnection").finish_non_exhaustive()
    }
}

impl Deref for ClusterConnection {
    type Target = redis::cluster::ClusterConnection;

    fn deref(&self) -> &Self::Target {
        &self.conn
    }
}

impl DerefMut for ClusterConnection {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.conn
    }
}

/// Whether `e` is a Redis Cluster's refusal of a call while the slot of
/// its keys moves, with nothing run: `TRYAGAIN` (a command on several keys
/// of a slot in migration whose keys are split between the two nodes, or
/// missing from the importing one: every script of the lock names several),
/// or a redirection the client's one retry could not follow (`MOVED`,
/// `ASK`: the nodes do not agree yet where the slot is). redis-rs's own
/// retries, cut to one here, used to wait that out.
pub(crate) fn slot_moving(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if matches!(r.code(), Some("TRYAGAIN" | "MOVED" | "ASK")))
}

/// The least a call must have left of its bound, after a pause, to be sent
/// again by [`pause_for_slot`], however short its I/O timeout: its
/// client's two tries and their pause.
const LEAST_FOR_A_TRY: Duration = Duration::from_millis(100);

/// Waits before a call refused by [`slot_moving`] for the `refusals`th time
/// is sent again: 10 ms, doubling up to 160 ms. False, at once, when what is
/// `left` of its bound after the pause would give its client's tries less
/// than half the I/O timeout `io` each (their socket timeouts share what is
/// left): a node that answers within the I/O timeout must not time a call
/// sent again out, and a timeout, unlike a refusal, ends a wait.
pub(super) fn pause_for_slot(refusals: u32, left: Duration, io: Duration) -> bool {
    let pause = CLUSTER_MOVING_PAUSE
        .saturating_mul(1 << refusals.min(8))
        .min(CLUSTER_MOVING_PAUSE_MAX);
    let least = io.saturating_add(CLUSTER_RETRY_WAIT).max(LEAST_FOR_A_TRY);
    if left < pause.saturating_add(least) {
        return false;
    }
    // A wait on a condition variable nobody signals: a pause, never a sleep.
    let (lock, never) = (parking_lot::Mutex::new(()), parking_lot::Condvar::new());
    let mut guard = lock.lock();
    let until = std::time::Instant::now() + pause;
    while !never.wait_until(&mut guard, until).timed_out() {}
    true
}

/// The connection info of the node at `host:port`: `template`'s (user,
/// password, protocol, database, TLS and its certificates) with that
/// address.
pub(crate) fn at(template: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let host = host.to_owned();
    let addr = match template.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    template.clone().set_addr(addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::IntoConnectionInfo;

    #[allow(clippy::unwrap_used)]
    fn info(url: &str) -> ConnectionInfo {
        url.into_connection_info().unwrap()
    }

    /// A node's connection keeps everything of the pool's but the address:
    /// user, password, protocol, database, and TLS with its mode.
    #[test]
    fn a_nodes_connection_keeps_the_pools_settings() {
        let node = at(
            &info("redis://app:s3cret@10.0.0.1:7000/0?protocol=resp3"),
            "10.0.0.9",
            7009,
        );
        assert!(matches!(node.addr(), ConnectionAddr::Tcp(h, 7009) if h == "10.0.0.9"));
        let redis = node.redis_settings();
        assert_eq!(redis.username(), Some("app"));
        assert_eq!(redis.password(), Some("s3cret"));
        assert_eq!(redis.protocol(), redis::ProtocolVersion::RESP3);
        // TLS, as `rediss://` (with the `tls` feature) or a client with
        // certificates of its own gives it.
        for insecure in [false, true] {
            let template = info("redis://:pw@h:6380/").set_addr(ConnectionAddr::TcpTls {
                host: "h".to_owned(),
                port: 6380,
                insecure,
                tls_params: None,
            });
            let node = at(&template, "10.0.0.9", 7009);
            assert!(
                matches!(node.addr(), ConnectionAddr::TcpTls { host, port: 7009, insecure: i, .. }
                    if host == "10.0.0.9" && *i == insecure),
                "{:?}",
                node.addr()
            );
            assert_eq!(node.redis_settings().password(), Some("pw"));
        }
    }

    /// Nothing of the settings shows in `Debug`.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn debug_shows_no_password() {
        let url = "redis://:hunter2@127.0.0.1:7000/";
        let manager = ClusterManager::new(ClusterClient::builder([url]), info(url)).unwrap();
        assert!(!format!("{manager:?}").contains("hunter2"));
    }

    /// A call sent again while a slot moves gets what is left of its
    /// bound, less than a first try: its socket timeouts follow that, but
    /// the connect timeout of every connection the manager makes later
    /// must not (it would stay cut for good: a few tens of ms after one
    /// migration). It follows a first try's, as a call whose checkout took
    /// its whole timeout has.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_resends_short_try_leaves_the_connect_timeout() {
        let (nodes, dir) =
            redmutex_testkit::cluster::start_cluster(0, &[], Duration::from_secs(60)).unwrap();
        let url = nodes[0].url();
        let manager = ClusterManager::new(ClusterClient::builder([url.as_str()]), info(&url));
        let pool = crate::conn::builder()
            .max_size(1)
            .build_unchecked(manager.unwrap());
        let mut conn = pool.get_timeout(Duration::from_secs(10)).unwrap();
        let now = |conn: &r2d2::PooledConnection<ClusterManager>| {
            conn.shared.connect_ms.load(Ordering::Relaxed)
        };
        let io = Duration::from_secs(1);
        // A first try, its checkout at once, then one after a checkout of
        // its whole timeout (left: the I/O timeout).
        super::super::timeouts::bound_io_within(&mut conn, io, 2 * io).unwrap();
        assert_eq!(now(&conn), 330);
        super::super::timeouts::bound_io_within(&mut conn, io, io).unwrap();
        assert_eq!(now(&conn), 164);
        // A resend's, late in the call's bound.
        super::super::timeouts::bound_io_within(&mut conn, io, Duration::from_millis(150)).unwrap();
        assert_eq!(
            now(&conn),
            164,
            "a resend's short try cut the connect timeout"
        );
        drop((conn, pool, nodes));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A locker's shorter I/O timeout shortens the connect timeout of the
    /// connections made next, never lengthens it.
    #[test]
    #[allow(clippy::unwrap_used)]
    fn the_connect_timeout_follows_the_shortest_try() {
        let url = "redis://127.0.0.1:7000/";
        let manager = ClusterManager::new(ClusterClient::builder([url]), info(url)).unwrap();
        let shared = &manager.shared;
        let now = || shared.connect_ms.load(Ordering::Relaxed);
        assert_eq!(now(), 600);
        shared.connect_within(Duration::from_millis(1980));
        assert_eq!(now(), 600);
        shared.connect_within(Duration::from_millis(980));
        assert_eq!(now(), 327);
        shared.connect_within(Duration::from_millis(1980));
        assert_eq!(now(), 327);
    }
}
