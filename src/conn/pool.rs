//! The pools this crate builds, and the customizer that bounds every
//! socket call of a pool you build yourself.

use std::time::Duration;

use r2d2::{CustomizeConnection, ManageConnection, Pool};
use redis::RedisError;

use crate::defaults::{DEFAULT_CHECKOUT_TIMEOUT, DEFAULT_IO_TIMEOUT, DEFAULT_POOL_SIZE};
use crate::Error;

/// Builds a connection pool with the settings a lock needs.
///
/// - every connection gets read and write timeouts of [`DEFAULT_IO_TIMEOUT`]
///   the moment it is made (through [`SocketTimeouts`]), so a stalled server
///   costs a bounded wait, not a hung thread;
/// - no `PING` at checkout: r2d2's default test costs a full round trip on
///   every lock operation, and a broken connection is discarded anyway when
///   it fails;
/// - checkout waits at most [`DEFAULT_CHECKOUT_TIMEOUT`];
/// - at most [`DEFAULT_POOL_SIZE`] connections, one kept open when idle;
/// - a connection that fails is logged as r2d2 logs it (`error`, target
///   `r2d2`), without the arguments a server quotes back in an "unknown
///   command" error (a `HELLO 3 AUTH <user> <password>` the server does not
///   know): no log line holds the password.
///
/// Nothing is sent to the server yet: an unreachable server shows up as
/// [`Error::Pool`] on the first lock operation, after the checkout timeout.
///
/// One wait is not bounded here: r2d2 opens connections on its own worker
/// threads through `Client::get_connection`, whose handshake has no timeout,
/// so a frozen server can hold those workers until it answers again. Lock
/// calls are not held with them: they give up after the checkout timeout.
///
/// # Errors
///
/// [`Error::InvalidUrl`] when `url` is not a valid Redis URL, saying which
/// part is wrong.
///
/// # Examples
///
/// ```no_run
/// let pool = redmutex::pool("redis://127.0.0.1:6379/")?;
/// let locker = redmutex::Locker::new(pool);
/// # let _ = locker;
/// # Ok::<(), redmutex::Error>(())
/// ```
pub fn pool(url: &str) -> Result<Pool<redis::Client>, Error> {
    Ok(pool_with(crate::open::client(url)?))
}

/// Builds a connection pool with the settings of [`pool`] around a client
/// you made: one with TLS certificates of your own (the `tls` feature's
/// `redis::Client::build_with_tls`), or any other client settings.
///
/// # Examples
///
/// ```no_run
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let locker = redmutex::Locker::new(redmutex::pool_with(client));
/// # let _ = locker;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn pool_with(client: redis::Client) -> Pool<redis::Client> {
    #[cfg(feature = "tls")]
    install_crypto_provider();
    builder()
        .connection_customizer(Box::new(SocketTimeouts::new(DEFAULT_IO_TIMEOUT)))
        .build_unchecked(client)
}

/// The pool settings every pool this crate builds shares: at most
/// [`DEFAULT_POOL_SIZE`] connections, one kept open when idle, no `PING`
/// at checkout, checkouts bounded by [`DEFAULT_CHECKOUT_TIMEOUT`].
pub(crate) fn builder<M: ManageConnection<Error = RedisError>>() -> r2d2::Builder<M> {
    Pool::builder()
        .max_size(DEFAULT_POOL_SIZE)
        .min_idle(Some(1))
        .test_on_check_out(false)
        .connection_timeout(DEFAULT_CHECKOUT_TIMEOUT)
        .error_handler(Box::new(Unquoted))
}

/// r2d2's handler of a failed connection, as its own logs it (`error`,
/// target `r2d2`), but never with the arguments a server quotes back: a
/// server that does not know a command of the handshake (`HELLO 3 AUTH
/// <user> <password>`, a renamed `AUTH`) quotes the password (see
/// [`unquoted`]).
#[derive(Debug)]
struct Unquoted;

impl r2d2::HandleError<RedisError> for Unquoted {
    fn handle_error(&self, error: RedisError) {
        log::error!(target: "r2d2", "{}", unquoted(&error.to_string()));
    }
}

/// `text` (a redis-rs error's) without the arguments a server quotes in
/// an "unknown command" error (`..., with args beginning with: '3' 'AUTH'
/// 'user' 'password'`): for a log line.
fn unquoted(text: &str) -> String {
    const QUOTED: &str = "with args beginning with:";
    match text.find(QUOTED) {
        Some(at) => format!(
            "{}{QUOTED} (not shown: they may hold a password)",
            text.get(..at).unwrap_or_default()
        ),
        None => text.to_owned(),
    }
}

/// With the `tls` feature, rustls needs a process-wide crypto provider
/// before the first `rediss://` connection; it finds ring (this crate's
/// choice) on its own unless another crate in the program enables a second
/// one, and then panics on a pool's connecting thread. So the pool makes
/// ring the default when none is installed yet: a program that wants
/// another installs it before building a pool.
#[cfg(feature = "tls")]
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err: another thread installed one first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// An r2d2 connection customizer that sets read and write timeouts on every
/// new connection, for pools you build yourself.
///
/// A sync redis-rs connection has no read timeout once connected: without
/// one, a command to a stalled server blocks forever. [`pool`] installs this
/// customizer; add it to your own pool the same way.
///
/// ```no_run
/// use std::time::Duration;
/// let pool = r2d2::Pool::builder()
///     .max_size(32)
///     .test_on_check_out(false)
///     .connection_customizer(Box::new(redmutex::SocketTimeouts::new(Duration::from_secs(1))))
///     .build(redis::Client::open("redis://127.0.0.1/")?)?;
/// let locker = redmutex::Locker::new(pool);
/// # let _ = locker;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct SocketTimeouts {
    timeout: Duration,
}

impl SocketTimeouts {
    /// Read and write timeouts of `timeout` (a zero duration means
    /// [`DEFAULT_IO_TIMEOUT`], since sockets cannot take a zero timeout).
    ///
    /// ```
    /// let t = redmutex::SocketTimeouts::new(std::time::Duration::from_millis(500));
    /// # let _ = t;
    /// ```
    pub fn new(timeout: Duration) -> Self {
        let timeout = if timeout.is_zero() {
            DEFAULT_IO_TIMEOUT
        } else {
            timeout
        };
        SocketTimeouts { timeout }
    }
}

impl CustomizeConnection<redis::Connection, RedisError> for SocketTimeouts {
    fn on_acquire(&self, conn: &mut redis::Connection) -> Result<(), RedisError> {
        conn.set_read_timeout(Some(self.timeout))?;
        conn.set_write_timeout(Some(self.timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_arguments_are_left_out_of_log_lines() {
        let text = "ResponseError: unknown command 'HELLO', with args beginning with: '3' \
                    'AUTH' 'u' 'hunter2' ";
        let line = unquoted(text);
        assert!(
            line.starts_with("ResponseError: unknown command 'HELLO'"),
            "{line}"
        );
        assert!(!line.contains("hunter2"), "{line}");
        assert_eq!(unquoted("Connection refused"), "Connection refused");
    }
}
