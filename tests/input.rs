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
    invalid(locker.lock_all(&[] as &[&str]));
    invalid(locker.try_lock_all(&[] as &[&str]));
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
fn a_bad_url_is_an_invalid_url() {
    let r = Locker::open("not a url");
    assert!(matches!(r, Err(Error::InvalidUrl { .. })), "{r:?}");
    assert!(redmutex::pool("http://example.com/").is_err());
}

/// The reserved marker is refused wherever it stands in a key or a prefix,
/// so no lock, under any prefix, can land on a counter, a queue or a
/// waiters' hash of any prefix.
#[test]
fn the_reserved_marker_is_refused_anywhere() {
    let server = Server::start();
    let bare = server.locker();
    for k in [
        "jobs:__redmutex__:queue:x",
        "b:__redmutex__:fence",
        "x__redmutex__",
        "__redmutex__",
    ] {
        invalid(bare.try_lock(k));
        invalid(bare.lock(k));
        invalid(bare.try_lock_all(&["ok", k]));
        invalid(bare.holder(k));
    }
    invalid(server.builder().prefix("a:__redmutex__").build());
    invalid(server.builder().prefix("__redmutex__").build());
}

/// A bare locker's key that spells another prefix's internal key, as
/// `jobs:__redmutex__:queue:x` would, must not break that prefix's locks.
#[test]
fn no_user_key_reaches_an_internal_key_of_another_prefix() {
    let server = Server::start();
    let jobs = server.builder().prefix("jobs").build().unwrap();
    let bare = server.locker();
    // Taken before jobs:x has waiters, these would be strings where the
    // queue and the counter of jobs:x must go.
    let _squatters: Vec<_> = ["jobs:__redmutex__:queue:x", "jobs:__redmutex__:fence"]
        .iter()
        .map(|k| bare.try_lock(k))
        .collect();
    let held = jobs.lock("x").unwrap();
    // A waiter, so that the queue keys of jobs:x are used.
    let waiter = {
        let jobs = jobs.clone();
        std::thread::Builder::new()
            .spawn(move || {
                jobs.lock_timeout("x", Duration::from_secs(20))
                    .map(|g| g.fencing_token())
            })
            .unwrap()
    };
    common::wait_until("the waiter is queued", Duration::from_secs(10), || {
        redis::cmd("EXISTS")
            .arg(common::queue_keys(Some("jobs"), "x").0)
            .query::<bool>(&mut server.conn())
            .unwrap()
    });
    held.unlock().unwrap();
    let token = waiter.join().unwrap().unwrap();
    assert!(token > 0);
}

/// Within one prefix, the waiters of one key are not the queue of another
/// (`x:deadlines` used to name both the waiters' hash of `x` and the queue
/// of the key `x:deadlines`).
#[test]
fn the_queue_of_one_key_is_not_the_waiters_of_another() {
    let server = Server::start();
    let a = server.slow_locker();
    let b = server.slow_locker();
    // Waiters on both keys, then releases hand each over.
    let gx = a.lock("x").unwrap();
    let gy = a.lock("x:deadlines").unwrap();
    let wx = {
        let b = b.clone();
        std::thread::Builder::new()
            .spawn(move || b.lock_timeout("x", Duration::from_secs(20)).is_ok())
            .unwrap()
    };
    let wy = {
        let b = b.clone();
        std::thread::Builder::new()
            .spawn(move || {
                b.lock_timeout("x:deadlines", Duration::from_secs(20))
                    .is_ok()
            })
            .unwrap()
    };
    for k in ["x", "x:deadlines"] {
        common::wait_until("both waiters queued", Duration::from_secs(10), || {
            redis::cmd("ZCARD")
                .arg(common::queue_keys(None, k).0)
                .query::<u64>(&mut server.conn())
                .unwrap_or(0)
                == 1
        });
    }
    gx.unlock().unwrap();
    gy.unlock().unwrap();
    assert!(wx.join().unwrap());
    assert!(wy.join().unwrap());
}

/// Issue 38, hole 8: every `Duration` a caller gives (settings, backoff
/// bounds, waits, `expire_at`) either is refused with `InvalidInput` or
/// works (a wait, then a `Timeout`); none reaches a script as a number Redis
/// refuses, and none panics.
#[test]
fn extreme_durations_wait_or_are_refused_never_a_redis_error() {
    let server = Server::start();
    let ms = Duration::from_millis;
    let k = common::key("extreme-durations");
    let held = server.locker().lock(&k).unwrap();
    // Representable as a deadline, too large for any expiry in Redis.
    let huge = [
        Duration::MAX,
        Duration::from_millis(u64::MAX),
        Duration::from_secs(u64::MAX / 1000),
        redmutex::MAX_TTL + ms(1),
    ];
    // A contended wait of 300 ms: a `Timeout`, or the setting was refused.
    let waits_then_times_out = |what: &str, built: Result<Locker, Error>| match built {
        Err(Error::InvalidInput(_)) => {}
        Ok(locker) => {
            let r = locker.lock_timeout(&k, ms(300));
            assert!(
                matches!(r, Err(Error::Timeout { .. })),
                "{what}: a contended lock_timeout gave {r:?}"
            );
        }
        Err(e) => panic!("{what}: build gave {e:?}"),
    };
    for d in huge {
        let backoffs = [
            Backoff::exponential(ms(8), d),
            Backoff::exponential(d, d),
            Backoff::fixed(d),
        ];
        for b in backoffs {
            waits_then_times_out(&format!("{b:?}"), server.builder().backoff(b).build());
        }
        waits_then_times_out(
            &format!("io timeout {d:?}"),
            server.builder().io_timeout(d).build(),
        );
        waits_then_times_out(
            &format!("checkout timeout {d:?}"),
            server.builder().checkout_timeout(d).build(),
        );
        waits_then_times_out(
            &format!("acquire timeout {d:?}"),
            server.builder().acquire_timeout(d).build(),
        );
        waits_then_times_out(
            &format!("max hold {d:?}"),
            server.builder().max_hold(d).build(),
        );
        invalid(server.builder().ttl(d).build());
        invalid(server.builder().drift(d).build());
        let locker = server.locker();
        invalid(locker.lock_timeout(&k, d));
        invalid(locker.lock_all_timeout(&[&k], d));
        invalid(
            locker
                .semaphore("extreme-sem", 1)
                .unwrap()
                .acquire_timeout(d),
        );
        invalid(locker.rwlock("extreme-rw").unwrap().read_timeout(d));
        invalid(locker.rwlock("extreme-rw").unwrap().write_timeout(d));
        let stop = std::sync::atomic::AtomicBool::new(false);
        invalid(locker.lock_or_stop(&k, Some(d), &stop));
        invalid(held.extend(d));
        // An expiry as far as an `Instant` goes: kept (at most MAX_TTL),
        // or refused; never a Redis error.
        let g = locker.lock(&common::key("extreme-expire-at")).unwrap();
        if let Some(at) = std::time::Instant::now().checked_add(d) {
            let r = g.expire_at(at);
            assert!(
                matches!(r, Ok(()) | Err(Error::InvalidInput(_))),
                "expire_at(now + {d:?}) gave {r:?}"
            );
        }
        let _: () = redis::cmd("DEL")
            .arg(common::key("extreme-expire-at"))
            .query(&mut server.conn())
            .unwrap();
    }
    held.ensure_held().unwrap();
}
