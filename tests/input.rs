//! Bad settings and bad arguments give `Error::InvalidInput` before anything
//! reaches Redis, never a panic.

mod common;

use std::time::Duration;

use common::Server;
use redmutex::{Backoff, Error, Locker};

fn invalid<T: std::fmt::Debug>(r: Result<T, Error>) {
    assert!(matches!(r, Err(Error::InvalidInput(_))), "{r:?}");
}

#[test]
fn builder_refuses_impossible_settings() {
    let server = Server::start();
    let ms = Duration::from_millis;
    invalid(server.builder().ttl(Duration::ZERO).build());
    invalid(server.builder().ttl(Duration::from_micros(500)).build());
    invalid(server.builder().ttl(ms(2)).build()); // nothing left after the drift allowance
    invalid(server.builder().ttl(Duration::from_secs(u64::MAX)).build()); // too large for Redis
    invalid(server.builder().acquire_timeout(Duration::MAX).build());
    invalid(server.builder().checkout_timeout(Duration::ZERO).build());
    invalid(server.builder().io_timeout(Duration::ZERO).build());
    invalid(server.builder().prefix("").build());
    invalid(
        server
            .builder()
            .backoff(Backoff::fixed(Duration::ZERO))
            .build(),
    );
    invalid(
        server
            .builder()
            .backoff(Backoff::exponential(ms(10), ms(5)))
            .build(),
    );
    invalid(
        server
            .builder()
            .backoff(Backoff::fixed(ms(1)).max_attempts(0))
            .build(),
    );
    assert!(server.builder().ttl(ms(3)).build().is_ok());
}

#[test]
fn bad_keys_are_refused() {
    let server = Server::start();
    let locker = server.locker();
    invalid(locker.lock(""));
    invalid(locker.try_lock(""));
    invalid(locker.holder(""));
    invalid(locker.lock("__redmutex__:fence"));
    invalid(locker.lock_all(&[]));
    invalid(locker.try_lock_all(&[]));
    invalid(locker.try_lock_all(&["a", "b", "a"]));
    invalid(locker.lock_all(&["a", ""]));
    invalid(locker.lock_timeout("a", Duration::MAX));
    invalid(locker.lock_all_timeout(&["a"], Duration::MAX));
    // Nothing was written by the refused calls.
    let n: i64 = redis::cmd("DBSIZE").query(&mut server.conn()).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn bad_extend_is_refused() {
    let server = Server::start();
    let g = server.locker().lock("extend-input").unwrap();
    invalid(g.extend(Duration::ZERO));
    invalid(g.extend(Duration::MAX));
    g.ensure_held().unwrap();
}

#[test]
fn a_bad_url_is_a_redis_error() {
    let r = Locker::open("not a url");
    assert!(matches!(r, Err(Error::Redis(_))), "{r:?}");
    assert!(redmutex::pool("http://example.com/").is_err());
}
