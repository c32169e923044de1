//! What a URL opens: the URL checked part by part and told in words, the
//! server and the password checked at once by `Locker::open`, and the
//! pools for Sentinel and Cluster.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use r2d2::Pool;
use redis::cluster::ClusterClient;
use redis::sentinel::{LockedSentinelClient, SentinelClient, SentinelServerType};
use redis::IntoConnectionInfo;

use crate::conn::{self, ClusterManager, SocketTimeouts};
use crate::defaults::{CLUSTER_CONNECT_TIMEOUT, DEFAULT_IO_TIMEOUT};
use crate::error::{auth_reason, unreachable_reason};
use crate::time;
use crate::Error;

/// The one-line reason a URL shows a Redis URL's form.
const FORM: &str = "redis://[[user]:password@]host[:port][/db]";

/// A client for `url`, or [`Error::InvalidUrl`] saying which part is wrong
/// (or which constructor to use instead). The URL itself is never repeated:
/// it may hold a password.
pub(crate) fn client(url: &str) -> Result<redis::Client, Error> {
    if let Some(reason) = url_problem(url, cfg!(feature = "tls")) {
        return Err(Error::InvalidUrl {
            reason,
            source: None,
        });
    }
    redis::Client::open(url).map_err(|e| Error::InvalidUrl {
        reason: "redis-rs refused it".to_owned(),
        source: Some(e),
    })
}

/// What is wrong with `url`, in words, or `None` when nothing found here
/// (redis-rs has the last word). `tls`: whether `rediss://` can work.
fn url_problem(url: &str, tls: bool) -> Option<String> {
    // As the URL parser does: spaces and control characters around the URL
    // (a line read from a file) are not part of it.
    let url = url.trim_matches(|c: char| c <= ' ');
    // Unix sockets (`unix:///path`, also `unix:/path`): redis-rs reads the
    // path and its query.
    if url.split_once(':').is_some_and(|(scheme, _)| {
        ["unix", "redis+unix", "valkey+unix"]
            .iter()
            .any(|unix| scheme.eq_ignore_ascii_case(unix))
    }) {
        return None;
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some(format!("no scheme: a Redis URL looks like {FORM}"));
    };
    let lower = scheme.to_ascii_lowercase();
    // The scheme is shown only when it cannot be anything else.
    let shown = if !scheme.is_empty()
        && scheme.len() <= 16
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        format!("`{scheme}`")
    } else {
        "the scheme".to_owned()
    };
    if lower.contains("sentinel") {
        return Some(format!(
            "{shown} is a Sentinel URL: use `Locker::open_sentinel` (or \
             `redmutex::sentinel_pool`) with the sentinels' redis:// URLs and the \
             master's name"
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    // The hosts: after the user name and password, which may hold commas.
    let hosts = authority.rsplit('@').next().unwrap_or("");
    if lower.contains("cluster") || hosts.contains(',') {
        return Some(
            "a Cluster of several nodes: use `Locker::open_cluster` (or \
             `redmutex::cluster_pool`) with one redis:// URL per node"
                .to_owned(),
        );
    }
    let tls_scheme = match lower.as_str() {
        "redis" | "valkey" => false,
        "rediss" | "valkeys" if !tls => {
            return Some(format!(
                "{shown} is TLS, which needs redmutex's `tls` feature: enable it \
                 (`features = [\"tls\"]` in Cargo.toml)"
            ));
        }
        "rediss" | "valkeys" => true,
        _ => {
            return Some(format!(
                "scheme {shown} is not a Redis scheme: use redis://, rediss:// (TLS), \
                 valkey://, valkeys:// or unix://"
            ));
        }
    };
    let parsed = match url::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(e) => {
            use url::ParseError as P;
            let reason = match e {
                P::InvalidPort => "the port is not a number from 0 to 65535".to_owned(),
                P::EmptyHost => format!("no host: {FORM}"),
                P::InvalidIpv4Address
                | P::InvalidIpv6Address
                | P::InvalidDomainCharacter
                | P::IdnaError => "the host is not a valid name or address".to_owned(),
                // The parser's own words never quote the input.
                other => format!("not a URL ({other}): {FORM}"),
            };
            return Some(reason);
        }
    };
    let host = parsed.host_str().unwrap_or("");
    if host.is_empty() {
        return Some(format!("no host: {FORM}"));
    }
    if host == "0.0.0.0" || host == "[::]" {
        return Some("the host is a wildcard address (0.0.0.0 or ::): name the server".to_owned());
    }
    let db = parsed.path().trim_matches('/');
    if !db.is_empty() && db.parse::<i64>().is_err() {
        return Some("the database (the path after the host) is not a number".to_owned());
    }
    if tls_scheme && parsed.fragment().is_some_and(|f| f != "insecure") {
        return Some("only `#insecure` may end a TLS URL".to_owned());
    }
    if let Some((_, p)) = parsed.query_pairs().find(|(k, _)| k == "protocol") {
        if !["2", "resp2", "3", "resp3"].contains(&p.as_ref()) {
            return Some("the `protocol` query parameter is not 2, resp2, 3 or resp3".to_owned());
        }
    }
    None
}

/// Connects to `client`'s server once and sends a `PING`, within
/// `timeout` in all: [`Error::Unreachable`] (with the address, never a
/// password) when no connection can be made (refused, an unknown host, no
/// answer to the handshake in time), [`Error::Auth`] when the server
/// refuses the credentials (or lack of them), [`Error::Unsupported`] or
/// [`Error::InvalidUrl`] for a handshake it refuses. A server that
/// answered the handshake but not the `PING` in what was left of `timeout`
/// passes: it is reachable, only slow.
///
/// The connection is made on a thread of its own, because redis-rs bounds
/// neither the host name's lookup nor its handshake as a whole (it waits
/// the timeout again for each handshake reply it misses, up to four): a
/// silent server held the caller twice the timeout or more. The thread ends
/// by itself when those end. No thread, no check.
pub(crate) fn check_server(client: &redis::Client, timeout: Duration) -> Result<(), Error> {
    let address = shown_address(client.get_connection_info().addr());
    let connected = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = {
        let client = client.clone();
        let address = address.clone();
        let connected = Arc::clone(&connected);
        std::thread::Builder::new()
            .name("redmutex-open".into())
            .spawn(move || {
                let _ = tx.send(ask_server(&client, &address, timeout, &connected));
            })
    };
    if spawned.is_err() {
        return Ok(());
    }
    match rx.recv_timeout(timeout) {
        Ok(told) => told,
        // Connected, and the PING not answered yet: slow, not unreachable.
        Err(_) if connected.load(Ordering::SeqCst) => Ok(()),
        Err(RecvTimeoutError::Timeout) => Err(Error::Unreachable {
            address,
            reason: format!("timed out (no answer within {timeout:?})"),
        }),
        // The thread died without a word: as no check.
        Err(RecvTimeoutError::Disconnected) => Ok(()),
    }
}

/// `addr` as a URL names it: `host:port`, an IPv6 host in brackets
/// (`[::1]:6379`; redis-rs writes `::1:6379`), or the socket's path.
fn shown_address(addr: &redis::ConnectionAddr) -> String {
    match addr {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. }
            if host.contains(':') =>
        {
            format!("[{host}]:{port}")
        }
        other => other.to_string(),
    }
}

/// The check itself: connect, then `PING` with what the handshake left of
/// `timeout`; `connected` is set once the handshake is done.
fn ask_server(
    client: &redis::Client,
    address: &str,
    timeout: Duration,
    connected: &AtomicBool,
) -> Result<(), Error> {
    let Some(deadline) = time::deadline(Instant::now(), timeout) else {
        return Ok(());
    };
    let mut conn = match client.get_connection_with_timeout(timeout) {
        Ok(conn) => conn,
        Err(e) => {
            let reason = unreachable_reason(&e, timeout);
            return match Error::from(e) {
                e @ (Error::Auth { .. } | Error::Unsupported { .. } | Error::InvalidUrl { .. }) => {
                    Err(e)
                }
                _ => match reason {
                    Some(reason) => Err(Error::Unreachable {
                        address: address.to_owned(),
                        reason,
                    }),
                    // Another answer (a server still loading, say): it is
                    // there, and lock calls say the rest.
                    None => Ok(()),
                },
            };
        }
    };
    connected.store(true, Ordering::SeqCst);
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero()
        || conn.set_read_timeout(Some(left)).is_err()
        || conn.set_write_timeout(Some(left)).is_err()
    {
        return Ok(());
    }
    match redis::cmd("PING").query::<redis::Value>(&mut conn) {
        Err(e) if auth_reason(&e).is_some() => Err(e.into()),
        _ => Ok(()),
    }
}

/// Builds a connection pool to the master a group of Redis Sentinels
/// names `master`, with the settings of [`pool`](crate::pool()): socket
/// timeouts of [`DEFAULT_IO_TIMEOUT`] on every connection, no `PING` at
/// checkout, checkouts bounded by [`DEFAULT_CHECKOUT_TIMEOUT`](crate::DEFAULT_CHECKOUT_TIMEOUT), at most
/// [`DEFAULT_POOL_SIZE`](crate::DEFAULT_POOL_SIZE) connections. Each connection asks the sentinels
/// for the current master, so after a failover new connections reach the
/// new one (see the crate docs' "Topologies and what they promise").
///
/// `sentinels` are the sentinels' own URLs (`redis://host:26379/`). For a
/// password or TLS on the master itself, build a
/// `redis::sentinel::SentinelClient` with its `SentinelNodeConnectionInfo`
/// and a pool around `LockedSentinelClient::new(client)` the same way.
///
/// # Errors
///
/// [`Error::InvalidUrl`] when a URL is not a valid Redis URL, or none is
/// given. Nothing is sent to the sentinels yet.
///
/// # Examples
///
/// ```no_run
/// let pool = redmutex::sentinel_pool(
///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
///     "mymaster",
/// )?;
/// let locker = redmutex::Locker::builder(pool).min_replicas(1).build()?;
/// # let _ = locker;
/// # Ok::<(), redmutex::Error>(())
/// ```
pub fn sentinel_pool<I>(sentinels: I, master: &str) -> Result<Pool<LockedSentinelClient>, Error>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let urls = checked_urls(sentinels)?;
    // A `String`: redis-rs takes only that without its TLS feature.
    let client =
        SentinelClient::build(urls, String::from(master), None, SentinelServerType::Master)
            .map_err(|e| Error::InvalidUrl {
                reason: "redis-rs refused the sentinels' URLs".to_owned(),
                source: Some(e),
            })?;
    Ok(conn::builder()
        .connection_customizer(Box::new(SocketTimeouts::new(DEFAULT_IO_TIMEOUT)))
        .build_unchecked(LockedSentinelClient::new(client)))
}

/// Builds a connection pool to a Redis Cluster from the URLs of some of its
/// nodes (the rest are found from them), with a response timeout of
/// [`DEFAULT_IO_TIMEOUT`], 600 ms to connect to a node and for each reply
/// of its handshake (less when a locker's I/O timeout needs it, see
/// [`ClusterManager`]), no `PING` at checkout, checkouts bounded by
/// [`DEFAULT_CHECKOUT_TIMEOUT`](crate::DEFAULT_CHECKOUT_TIMEOUT), at most
/// [`DEFAULT_POOL_SIZE`](crate::DEFAULT_POOL_SIZE) connections (each a
/// connection to every node). The keys of one
/// [`Locker::lock_all`](crate::Locker::lock_all) must share a hash slot:
/// use hash tags (`{order42}:a`, `{order42}:b`).
///
/// The first URL's user, password, TLS (`rediss://`, `#insecure`) and
/// protocol are the cluster client's, and the release listener's too: its
/// connections to the masters (see the crate docs' "Waiting") log in as
/// the pool's do, so a cluster that wants a password, an ACL user or TLS
/// wakes its waiters. Its client sends a call again by itself once at
/// most (to follow a `MOVED` or `ASK` redirection), so that every call
/// keeps its bound of the checkout and I/O timeouts, a hung master
/// included. See [`ClusterManager`], to build one with settings of your
/// own; a pool of a plain `ClusterClient` of your own keeps redis-rs's 16
/// retries, each of which can cost an I/O timeout, and its listener
/// connects by address alone.
///
/// # Errors
///
/// [`Error::InvalidUrl`] when a URL is not a valid Redis URL, or none is
/// given. Nothing is sent to the nodes yet.
///
/// # Examples
///
/// ```no_run
/// let pool = redmutex::cluster_pool(["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"])?;
/// let locker = redmutex::Locker::new(pool);
/// # let _ = locker;
/// # Ok::<(), redmutex::Error>(())
/// ```
pub fn cluster_pool<I>(nodes: I) -> Result<Pool<ClusterManager>, Error>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let urls = checked_urls(nodes)?;
    let refused = |e| Error::InvalidUrl {
        reason: "redis-rs refused the nodes' URLs".to_owned(),
        source: Some(e),
    };
    // The first node's settings are the client's (redis-rs takes them from
    // it, and refuses nodes whose settings differ).
    let node = urls
        .first()
        .map(|url| url.as_str().into_connection_info())
        .transpose()
        .map_err(refused)?
        .ok_or_else(|| Error::InvalidUrl {
            reason: "no URL given".to_owned(),
            source: None,
        })?;
    let client = ClusterClient::builder(urls)
        .connection_timeout(CLUSTER_CONNECT_TIMEOUT)
        .response_timeout(DEFAULT_IO_TIMEOUT);
    let manager = ClusterManager::new(client, node)?;
    Ok(conn::builder().build_unchecked(manager))
}

/// Each of `urls` checked as [`client`] checks one; at least one.
fn checked_urls<I>(urls: I) -> Result<Vec<String>, Error>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
    if urls.is_empty() {
        return Err(Error::InvalidUrl {
            reason: "no URL given".to_owned(),
            source: None,
        });
    }
    for url in &urls {
        if let Some(reason) = url_problem(url, cfg!(feature = "tls")) {
            return Err(Error::InvalidUrl {
                reason,
                source: None,
            });
        }
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::handshake_unknown;

    fn problem(url: &str) -> String {
        url_problem(url, false).unwrap_or_default()
    }

    #[test]
    fn good_urls_pass() {
        for url in [
            "redis://127.0.0.1/",
            "redis://127.0.0.1:6379/3",
            "redis://:pw@localhost:6379/",
            "redis://user:pw@[::1]:6379/0?protocol=resp3",
            "valkey://cache.internal",
            "unix:///tmp/redis.sock",
        ] {
            assert_eq!(url_problem(url, false), None, "{url}");
        }
        assert_eq!(url_problem("rediss://h:6380/#insecure", true), None);
    }

    #[test]
    fn each_bad_part_is_named() {
        assert!(problem("http://h/").contains("`http` is not a Redis scheme"));
        assert!(problem("h:6379").contains("no scheme"));
        assert!(problem("redis://h:70000/").contains("port"));
        assert!(problem("redis://h/x").contains("database"));
        assert!(problem("redis://0.0.0.0/").contains("wildcard"));
        assert!(problem("redis://h/?protocol=9").contains("protocol"));
        assert!(url_problem("rediss://h/#x", true).is_some_and(|p| p.contains("#insecure")));
        assert!(problem("rediss://h/").contains("`tls` feature"));
        assert!(problem("redis+sentinel://h/m").contains("Locker::open_sentinel"));
        assert!(problem("redis://a:1,b:2/").contains("Locker::open_cluster"));
    }

    #[test]
    fn an_unknown_handshake_command_is_told_without_its_arguments() {
        for text in [
            "ResponseError: unknown command 'HELLO', with args beginning with: '3' 'AUTH' 'u' 'hunter2' ",
            "timed out waiting for connection: ERR unknown command `HELLO`, with args beginning with: `3`, `AUTH`, `u`, `hunter2`, ",
            "unknown command 'AUTH', with args beginning with: 'hunter2' ",
            "Redis Server doesn't support HELLO command therefore resp3 cannot be used - RESP3NotSupported",
        ] {
            let e = handshake_unknown(text).map(|e| format!("{e} {e:?}"));
            assert!(e.as_ref().is_some_and(|e| !e.contains("hunter2")), "{text}: {e:?}");
        }
        assert!(
            handshake_unknown("unknown command 'EVALSHA', with args beginning with: 'x' ")
                .is_none()
        );
        assert!(handshake_unknown("Connection refused (os error 111)").is_none());
    }

    #[test]
    fn no_password_is_repeated() {
        for url in [
            "http://u:hunter2@h/",
            "redis://u:hunter2@h:99999/",
            "redis://u:hunter2@h/x",
            "rediss://u:hunter2@h/",
            "hunter2@h:6379",
            "redis+sentinel://u:hunter2@h/m",
            "redis://u:hunter2@a,b/",
            "pass:hunter2://h/",
        ] {
            let p = problem(url);
            assert!(!p.is_empty() && !p.contains("hunter2"), "{url}: {p}");
        }
    }
}
