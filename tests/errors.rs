//! Errors say what went wrong in their `Display` (the cause stays in
//! `source()`), and never show a password.

mod common;

use std::error::Error as _;
use std::time::{Duration, Instant};

use common::Server;
use redmutex::{Error, Locker};

/// The error's text, its `Debug`, and every source's text, for checks that
/// nothing secret shows anywhere.
fn everything(e: &Error) -> String {
    let mut all = format!("{e}\n{e:?}");
    let mut source = e.source();
    while let Some(s) = source {
        all.push_str(&format!("\n{s}\n{s:?}"));
        source = s.source();
    }
    all
}

#[allow(clippy::panic)] // a helper of the tests: failing loudly is the point
fn open_err(url: &str) -> Error {
    match Locker::open(url) {
        Ok(_) => panic!("{url}: opened"),
        Err(e) => e,
    }
}

#[test]
fn an_invalid_url_says_which_part() {
    for (url, words) in [
        ("http://127.0.0.1:6379/", &["scheme", "http"][..]),
        ("127.0.0.1:6379", &["scheme"][..]),
        ("not a url", &["redis://"][..]),
        ("redis://127.0.0.1:99999/", &["port"][..]),
        ("redis://127.0.0.1:6379/first", &["database"][..]),
        ("redis://:6379/", &["host"][..]),
    ] {
        let e = open_err(url);
        let text = e.to_string();
        for w in words {
            assert!(text.contains(w), "{url}: {text:?} lacks {w:?}");
        }
        // The pool constructor says the same.
        let p = redmutex::pool(url).map(|_| ()).unwrap_err();
        assert_eq!(p.to_string(), text, "{url}");
    }
}

#[cfg(not(feature = "tls"))]
#[test]
fn a_tls_url_without_the_feature_says_to_enable_tls() {
    let text = open_err("rediss://127.0.0.1:6380/").to_string();
    assert!(text.contains("`tls` feature"), "{text}");
}

#[cfg(feature = "tls")]
#[test]
fn a_tls_url_with_the_feature_opens() {
    // Nothing answers there: the locker opens all the same (the server is
    // asked at first use).
    assert!(redmutex::pool("rediss://127.0.0.1:1/").is_ok());
}

#[test]
fn a_sentinel_or_cluster_url_names_the_constructor_to_use() {
    for url in [
        "redis+sentinel://127.0.0.1:26379/mymaster",
        "rediss+sentinel://127.0.0.1:26379/mymaster",
        "valkey+sentinel://127.0.0.1:26379/mymaster",
    ] {
        let text = open_err(url).to_string();
        assert!(text.contains("Locker::open_sentinel"), "{url}: {text}");
    }
    for url in [
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001/",
        "redis://127.0.0.1:7000,127.0.0.1:7001/",
    ] {
        let text = open_err(url).to_string();
        assert!(text.contains("Locker::open_cluster"), "{url}: {text}");
    }
}

const PASSWORD: &str = "pw-0f9e8d7c6b5a";

#[test]
fn a_wrong_password_is_told_at_once() {
    let server = Server::start_with(&["--requirepass", PASSWORD]);
    let url = format!("redis://:wrong-{PASSWORD}@127.0.0.1:{}/", server.port());
    let start = Instant::now();
    let e = Locker::open(&url)
        .and_then(|l| l.try_lock("errors:wrong-password").map(drop))
        .unwrap_err();
    let took = start.elapsed();
    let text = e.to_string();
    assert!(text.contains("authentication failed"), "{text}");
    // Not after the checkout timeout: the first connection says it.
    assert!(took < redmutex::DEFAULT_CHECKOUT_TIMEOUT, "{took:?}");
    assert!(!everything(&e).contains(PASSWORD), "{e:?}");
}

#[test]
fn a_missing_password_is_told_at_once() {
    let server = Server::start_with(&["--requirepass", PASSWORD]);
    let start = Instant::now();
    let e = Locker::open(&server.url())
        .and_then(|l| l.try_lock("errors:no-password").map(drop))
        .unwrap_err();
    let took = start.elapsed();
    let text = e.to_string();
    assert!(text.contains("requires a password"), "{text}");
    assert!(took < redmutex::DEFAULT_CHECKOUT_TIMEOUT, "{took:?}");
}

#[test]
fn a_pool_without_the_password_says_so_on_first_use() {
    let server = Server::start_with(&["--requirepass", PASSWORD]);
    let locker = Locker::new(redmutex::pool(&server.url()).unwrap());
    let e = locker.try_lock("errors:pool-no-password").unwrap_err();
    let text = e.to_string();
    assert!(text.contains("requires a password"), "{text}");
    assert!(!e.is_connection(), "{e:?}");
}

#[test]
fn a_pool_with_a_wrong_password_says_so_after_the_checkout_timeout() {
    let server = Server::start_with(&["--requirepass", PASSWORD]);
    let url = format!("redis://:wrong-{PASSWORD}@127.0.0.1:{}/", server.port());
    // r2d2 retries a failing connect until the checkout timeout: a pool of
    // one's own is told then, with the reason.
    let locker = Locker::builder(redmutex::pool(&url).unwrap())
        .checkout_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = locker.try_lock("errors:pool-wrong-password").unwrap_err();
    let text = e.to_string();
    assert!(text.contains("authentication failed"), "{text}");
    assert!(!everything(&e).contains(PASSWORD), "{e:?}");
}

#[test]
fn the_right_password_works() {
    let server = Server::start_with(&["--requirepass", PASSWORD]);
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/", server.port());
    let locker = Locker::open(&url).unwrap();
    let guard = locker.try_lock("errors:right-password").unwrap();
    assert!(guard.is_some());
    // Even a Debug of the locker does not show the password.
    assert!(!format!("{locker:?}").contains(PASSWORD));
}

#[test]
fn a_url_redis_rs_accepts_is_not_refused() {
    // The check names what is wrong; it must not refuse what works.
    for url in [
        // A comma in a password or a user name is not a node list.
        "redis://:pa,ss@127.0.0.1:1/",
        "redis://us,er:pa,ss@127.0.0.1:1/",
        // Unix sockets written without the empty authority.
        "unix:/nonexistent/redmutex.sock",
        "redis+unix:/nonexistent/redmutex.sock?db=1",
        // Spaces around it, as read from a file or a variable.
        " redis://127.0.0.1:1/",
        "redis://127.0.0.1:1/\n",
    ] {
        let theirs = redis::Client::open(url)
            .map(drop)
            .map_err(|e| e.to_string());
        let ours = redmutex::pool(url).map(drop).map_err(|e| e.to_string());
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "{url:?}: ours {ours:?}, redis-rs {theirs:?}"
        );
    }
    // And on a server whose password has a comma, a lock is taken.
    let password = "pa,ss-1b2c";
    let server = Server::start_with(&["--requirepass", password]);
    let url = format!("redis://:{password}@127.0.0.1:{}/", server.port());
    let locker = Locker::open(&url).unwrap();
    assert!(locker.try_lock("errors:comma-password").unwrap().is_some());
}

#[test]
fn a_missing_password_is_told_at_once_with_a_database_in_the_url() {
    // redis-rs sends SELECT with the handshake: the server's NOAUTH comes
    // back as "refused to switch database".
    let server = Server::start_with(&["--requirepass", PASSWORD]);
    let url = format!("{}2", server.url());
    let e = Locker::open(&url)
        .and_then(|l| l.try_lock("errors:no-password-db").map(drop))
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("requires a password"), "{text}");
    // A pool of one's own says the same on first use.
    let locker = Locker::builder(redmutex::pool(&url).unwrap())
        .checkout_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = locker.try_lock("errors:pool-no-password-db").unwrap_err();
    let text = e.to_string();
    assert!(text.contains("requires a password"), "{text}");
    assert!(!e.is_connection(), "{e:?}");
}

#[test]
fn a_server_that_does_not_know_hello_never_shows_the_password() {
    // `protocol=resp3` sends the password with HELLO; a server that does
    // not know HELLO (before Redis 6, or the command renamed) answers
    // "unknown command 'HELLO', with args beginning with: '3' 'AUTH'
    // 'default' '<password>'".
    let server = Server::start_with(&[
        "--requirepass",
        PASSWORD,
        "--rename-command",
        "HELLO",
        "HELLO-renamed",
    ]);
    let url = format!(
        "redis://:{PASSWORD}@127.0.0.1:{}/?protocol=resp3",
        server.port()
    );
    let e = Locker::open(&url)
        .and_then(|l| l.try_lock("errors:no-hello").map(drop))
        .unwrap_err();
    assert!(!everything(&e).contains(PASSWORD), "{e:?}");
    // Told at once, in words: Redis says HELLO is unknown; Valkey answers
    // NOAUTH to any unknown command before AUTH, and the reason given for
    // NOAUTH names this case beside a missing password.
    let text = e.to_string();
    assert!(text.contains("HELLO") && text.contains("resp3"), "{text}");
    // A pool of one's own: its checkout error keeps the last connect
    // error's text.
    let locker = Locker::builder(redmutex::pool(&url).unwrap())
        .checkout_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = locker.try_lock("errors:pool-no-hello").unwrap_err();
    assert!(!everything(&e).contains(PASSWORD), "{e:?}");
}

#[test]
fn a_password_for_a_server_without_one_says_so() {
    // `AUTH <password>` to a server with no password is refused ("called
    // without any password configured"), and redis-rs keeps only "Password
    // authentication failed": the reason must name this case too.
    let server = Server::start();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/", server.port());
    let e = Locker::open(&url).map(drop).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("authentication failed"), "{text}");
    assert!(text.contains("server without one"), "{text}");
    assert!(!everything(&e).contains(PASSWORD), "{e:?}");
}

#[test]
fn a_database_the_server_lacks_is_told_at_once() {
    // The URL's database is checked as a number; whether the server has it
    // only the server can say (SELECT, in redis-rs's handshake).
    let server = Server::start_with(&["--databases", "4"]);
    let url = format!("{}9", server.url());
    let start = Instant::now();
    let e = Locker::open(&url)
        .and_then(|l| l.try_lock("errors:no-such-db").map(drop))
        .unwrap_err();
    let took = start.elapsed();
    let text = e.to_string();
    assert!(text.contains("database"), "{text}");
    assert!(took < redmutex::DEFAULT_CHECKOUT_TIMEOUT, "{took:?}");
    // A pool of one's own says it on first use.
    let locker = Locker::builder(redmutex::pool(&url).unwrap())
        .checkout_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let text = locker
        .try_lock("errors:pool-no-such-db")
        .unwrap_err()
        .to_string();
    assert!(text.contains("database"), "{text}");
}

/// Each level of an error's chain, as a chain printer (`anyhow`'s `{:#}`,
/// a loop over `source()`) shows it: the error, then each source.
fn chain(e: &Error) -> Vec<String> {
    let mut levels = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        levels.push(s.to_string());
        source = s.source();
    }
    levels
}

/// No level of the chain says again what a level above it said: a chain
/// printer would print the cause twice.
fn assert_said_once(e: &Error) {
    let levels = chain(e);
    for (i, lower) in levels.iter().enumerate().skip(1) {
        for upper in levels.iter().take(i) {
            assert!(
                !upper.contains(lower.as_str()),
                "said twice: {lower:?} is already in {upper:?} (chain {levels:?})"
            );
        }
    }
}

/// The port of a server that was started and stopped: nothing listens
/// there now.
fn closed_port() -> u16 {
    let mut server = Server::start();
    let port = server.port();
    server.kill();
    port
}

/// A server that stopped: its port refuses connections. `Locker::open`
/// says so at once, with the address (never the password), as fast as it
/// tells a wrong password.
#[test]
fn a_closed_port_is_told_at_once_with_its_address() {
    let port = closed_port();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}/");
    let (opened, took) = common::timed(|| Locker::open(&url));
    let e = opened.unwrap_err();
    let text = e.to_string();
    assert!(text.contains("connection refused"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(e.is_connection(), "{e:?}");
    assert!(took < redmutex::DEFAULT_CHECKOUT_TIMEOUT, "{took:?}");
    assert!(!everything(&e).contains(PASSWORD), "{e:?}");
    assert_said_once(&e);
}

/// A server that accepts connections and never answers (stopped with
/// SIGSTOP): `Locker::open` fails within the I/O timeout, saying it timed
/// out, with the address.
#[test]
fn a_server_that_never_answers_is_told_within_the_io_timeout() {
    let server = Server::start();
    server.pause();
    let (opened, took) = common::timed(|| Locker::open(&server.url()));
    server.resume();
    let e = opened.unwrap_err();
    let text = e.to_string();
    assert!(text.contains("timed out"), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port())),
        "{text}"
    );
    assert!(e.is_connection(), "{e:?}");
    // Generous: the bound is the I/O timeout; a loaded machine may add to it.
    assert!(
        took < redmutex::DEFAULT_IO_TIMEOUT + Duration::from_secs(2),
        "{took:?}"
    );
    assert_said_once(&e);
}

/// A server stopped under a locker: each call's error is a connection
/// error, said once, and a call on a connection the stop cut says so.
#[test]
fn a_stopped_server_is_told_with_the_cause() {
    let mut server = Server::start();
    let locker = server
        .builder()
        .checkout_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    drop(locker.try_lock("errors:stopped").unwrap());
    server.kill();
    let mut said = Vec::new();
    for _ in 0..3 {
        let e = locker.try_lock("errors:stopped").unwrap_err();
        assert!(e.is_connection(), "{e:?}");
        assert_said_once(&e);
        said.push(e.to_string());
    }
    assert!(
        ["refused", "closed", "reset", "broken pipe"]
            .iter()
            .any(|w| said[0].contains(w)),
        "no cause in {said:?}"
    );
}

/// A pool to a port where nothing listens: its checkout error names the
/// refused connection (r2d2's last connection error), not only the
/// checkout timeout.
#[test]
fn a_pool_to_a_closed_port_says_the_connection_was_refused() {
    let url = format!("redis://127.0.0.1:{}/", closed_port());
    let locker = Locker::builder(redmutex::pool(&url).unwrap())
        .checkout_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = locker.try_lock("errors:closed-pool").unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("checkout timeout") && text.contains("connection refused"),
        "{text}"
    );
    assert!(e.is_connection(), "{e:?}");
    assert_said_once(&e);
}

/// A command of a guarded write fails: the error says what Redis said,
/// once in the chain.
#[test]
fn a_failing_command_in_run_if_held_says_what_redis_said() {
    let server = Server::start();
    let locker = server.locker();
    let _: () = redis::cmd("SET")
        .arg("{errors:cmd}:text")
        .arg("not a number")
        .query(&mut server.conn())
        .unwrap();
    let guard = locker.lock("{errors:cmd}").unwrap();
    let mut writes = redis::pipe();
    writes.cmd("INCR").arg("{errors:cmd}:text");
    let e = guard.run_if_held(&writes).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("not an integer"), "{text}");
    assert!(!e.is_connection(), "{e:?}");
    assert_said_once(&e);
    guard.unlock().unwrap();
}

/// A refused or missing password: said in words, the server's own words
/// once below, whether `open` or a pool's first call finds it.
#[test]
fn a_refused_password_is_said_once_in_the_chain() {
    let server = Server::start_with(&["--requirepass", PASSWORD]);
    let wrong = format!("redis://:wrong-{PASSWORD}@127.0.0.1:{}/", server.port());
    for url in [wrong, server.url()] {
        let e = Locker::open(&url).map(drop).unwrap_err();
        assert!(e.to_string().contains("authentication failed"), "{e}");
        assert_said_once(&e);
        let locker = Locker::builder(redmutex::pool(&url).unwrap())
            .checkout_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let e = locker.try_lock("errors:said-once").unwrap_err();
        assert!(e.to_string().contains("authentication failed"), "{e}");
        assert_said_once(&e);
    }
}

/// A Cluster whose nodes are all down: the lock call's error names the node
/// tried and the cause in a whole sentence (redis-rs's words nest the I/O
/// error in parentheses; cutting its `(os error N)` off the end cut their
/// closing parenthesis too).
#[test]
fn a_cluster_out_of_reach_is_told_with_its_node_in_a_whole_sentence() {
    let port = closed_port();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}/");
    let locker = Locker::builder(redmutex::cluster_pool([url.as_str()]).unwrap())
        .checkout_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = locker.try_lock("errors:cluster").unwrap_err();
    let text = e.to_string();
    assert!(e.is_connection(), "{e:?}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.to_lowercase().contains("connection refused"), "{text}");
    assert!(!text.contains("os error"), "{text}");
    assert_eq!(
        text.matches('(').count(),
        text.matches(')').count(),
        "unbalanced: {text}"
    );
    assert!(!everything(&e).contains(PASSWORD), "{e:?}");
    assert_said_once(&e);
}

/// An IPv6 server out of reach is named as its URL names it, in brackets
/// (`[::1]:6379`): `::1:6379` reads as another address.
#[test]
fn an_ipv6_address_is_named_in_brackets() {
    let port = closed_port();
    let e = open_err(&format!("redis://[::1]:{port}/"));
    let text = e.to_string();
    assert!(text.contains(&format!("[::1]:{port}")), "{text}");
}
