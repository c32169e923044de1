//! The `tls` feature against a real TLS server: a `redis-server` started on
//! a TLS port with a certificate authority and server certificate made
//! here. Locking, the watchdog's renewals and the release announcements
//! (pub/sub) all go over TLS, and a client that does not trust the server's
//! certificate gets no connection at all.
#![cfg(feature = "tls")]
#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{key, queue_keys, wait_until, TempDir, TlsFiles};
use redis::TlsCertificates;
use redmutex::{Backoff, Locker};
use redmutex_testkit as support;

/// A TLS-only server and the PEM of the authority that signed its
/// certificate.
struct TlsServer {
    server: support::ThrowAwayServer,
    ca_pem: String,
    _dir: TempDir,
}

impl TlsServer {
    fn start() -> TlsServer {
        let dir = TempDir::new("tls");
        let files = TlsFiles::new(&dir.0);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (p, d) = (port.to_string(), dir.0.to_string_lossy().into_owned());
        let mut args = vec!["--port", "0", "--tls-port", &p, "--bind", "127.0.0.1"];
        args.extend(files.server_args());
        args.extend_from_slice(support::QUIET);
        args.extend(["--dir", &d]);
        let server = support::ThrowAwayServer::launch(
            &args,
            port,
            "Ready to accept connections",
            Duration::from_secs(20),
        )
        .unwrap_or_else(|e| {
            panic!(
                "could not start a TLS server ({e}): the tls tests need a redis-server \
                 built with TLS (Debian's is)"
            )
        });
        TlsServer {
            server,
            ca_pem: files.ca_pem.clone(),
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.server.port())
    }

    /// A client that trusts the test's authority.
    fn client(&self) -> redis::Client {
        redis::Client::build_with_tls(
            self.url(),
            TlsCertificates {
                client_tls: None,
                root_cert: Some(self.ca_pem.clone().into_bytes()),
            },
        )
        .unwrap()
    }
}

#[test]
fn locks_renews_and_hands_over_over_tls() {
    let server = TlsServer::start();
    let ttl = Duration::from_millis(300);
    let a = Locker::builder(redmutex::pool_with(server.client()))
        .ttl(ttl)
        .build()
        .unwrap();
    // Only a release announced over TLS pub/sub gets this waiter the lock
    // before its minute of backoff.
    let b = Locker::builder(redmutex::pool_with(server.client()))
        .ttl(ttl)
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .build()
        .unwrap();
    let k = key("tls");
    let g = a.lock(&k).unwrap();
    let first = g.valid_until();
    // The watchdog renews over TLS: the lease outlives several TTLs.
    wait_until("three TTLs of renewals", Duration::from_secs(10), || {
        g.valid_until() > first + 3 * ttl
    });
    assert!(!g.is_lost());
    let fence = g.fencing_token();

    let (queue, _) = queue_keys(None, &k);
    let waiter = std::thread::spawn(move || {
        let start = Instant::now();
        let g = b.lock_timeout(&k, Duration::from_secs(30)).unwrap();
        (start.elapsed(), g.fencing_token())
    });
    let mut conn = server.client().get_connection().unwrap();
    wait_until("the waiter queued", Duration::from_secs(10), || {
        redis::cmd("EXISTS")
            .arg(&queue)
            .query::<bool>(&mut conn)
            .unwrap()
    });
    g.unlock().unwrap();
    let (waited, next_fence) = waiter.join().unwrap();
    assert!(
        waited < Duration::from_secs(30),
        "woken by the release, not by its backoff: waited {waited:?}"
    );
    assert!(next_fence > fence, "{next_fence} after {fence}");
}

#[test]
fn a_server_certificate_not_trusted_gives_no_connection() {
    let server = TlsServer::start();
    // The system's roots do not include the test's authority.
    let locker = Locker::builder(redmutex::pool(&server.url()).unwrap())
        .checkout_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let e = locker.try_lock(&key("untrusted")).err().unwrap();
    assert!(e.is_connection(), "{e:?}");
}
