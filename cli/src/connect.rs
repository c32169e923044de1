//! The locker a command works with: the server and prefix of its
//! options, with a run's lease settings.

use std::process::ExitCode;
use std::time::Duration;

use redmutex::{r2d2, redis};

use crate::args::Server;
use crate::exit::usage;

/// A locker on the server of `server`, or the exit code of a usage error
/// (said).
pub fn locker(
    server: &Server,
    ttl: Option<Duration>,
    max_hold: Option<Duration>,
    lock_delay: Option<Duration>,
) -> Result<redmutex::Locker, ExitCode> {
    // The URL itself is not repeated: a URL found wrong may hold a password
    // where the redaction below would not find it.
    let pool =
        redmutex::pool(&server.url).map_err(|e| usage(&format!("{}: {e}", origin(server))))?;
    build(pool, server, ttl, max_hold, lock_delay)
}

fn build(
    pool: r2d2::Pool<redis::Client>,
    server: &Server,
    ttl: Option<Duration>,
    max_hold: Option<Duration>,
    lock_delay: Option<Duration>,
) -> Result<redmutex::Locker, ExitCode> {
    let mut builder = redmutex::Locker::builder(pool);
    if let Some(p) = &server.prefix {
        builder = builder.prefix(p.clone());
    }
    if let Some(ttl) = ttl {
        builder = builder.ttl(ttl);
    }
    if let Some(hold) = max_hold {
        builder = builder.max_hold(hold);
    }
    if let Some(delay) = lock_delay {
        builder = builder.lock_delay(delay);
    }
    builder.build().map_err(|e| usage(&e.to_string()))
}

/// Where the server's URL came from, as the user would write it.
fn origin(server: &Server) -> &'static str {
    if server.from_env {
        "$REDIS_URL"
    } else {
        "--url"
    }
}

/// The server as messages name it: its URL without the password, and
/// where it came from (`redis://:***@cache:6379/ ($REDIS_URL)`).
pub fn shown(server: &Server) -> String {
    format!("{} ({})", without_password(&server.url), origin(server))
}

/// `url` with its password replaced by `***`: the user information's
/// (`redis://user:***@host/`), and any query value whose name holds
/// `pass` (`unix:///run/redis.sock?pass=***`), read as redis-rs reads it:
/// percent-decoded (`p%61ss`).
pub fn without_password(url: &str) -> String {
    let url = url.trim();
    let (before_query, query) = match url.find(['?', '#']) {
        Some(at) => url.split_at(at),
        None => (url, ""),
    };
    let mut shown = match before_query.split_once("://") {
        Some((scheme, rest)) => match rest.rfind('@') {
            Some(at) => {
                let (user_info, host) = (&rest[..at], &rest[at + 1..]);
                match user_info.split_once(':') {
                    Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
                    None => format!("{scheme}://{user_info}@{host}"),
                }
            }
            None => before_query.to_owned(),
        },
        None => before_query.to_owned(),
    };
    let mut rest = query;
    while !rest.is_empty() {
        // `?` or `&` (or `#`, which ends the query), then `name=value`.
        let (mark, after) = rest.split_at(1);
        let end = after.find(['&', '#']).unwrap_or(after.len());
        let (pair, next) = after.split_at(end);
        shown.push_str(mark);
        match pair.split_once('=') {
            Some((name, _)) if mark != "#" && decoded(name).to_lowercase().contains("pass") => {
                shown.push_str(name);
                shown.push_str("=***");
            }
            _ => shown.push_str(pair),
        }
        rest = next;
    }
    shown
}

/// A query parameter's name as redis-rs reads it (`url::Url::query_pairs`):
/// `%XX` decoded, `+` a space.
fn decoded(name: &str) -> String {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_never_shown() {
        for (url, want) in [
            ("redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/"),
            ("redis://:s3cret@h:1/", "redis://:***@h:1/"),
            ("redis://app:s3cret@h:1/2", "redis://app:***@h:1/2"),
            ("redis://app@h/", "redis://app@h/"),
            ("redis://:s3c@r:et@h/", "redis://:***@h/"),
            ("rediss://:s3cret@h/#insecure", "rediss://:***@h/#insecure"),
            (
                "unix:///run/r.sock?db=1&pass=s3cret&user=u",
                "unix:///run/r.sock?db=1&pass=***&user=u",
            ),
            (
                "redis+unix:///r.sock?password=s3cret",
                "redis+unix:///r.sock?password=***",
            ),
            (" redis://:s3cret@h/\n", "redis://:***@h/"),
            ("unix:///r.sock?p%61ss=s3cret", "unix:///r.sock?p%61ss=***"),
            (
                "unix:///r.sock?%50ASS=s3cret&x=%",
                "unix:///r.sock?%50ASS=***&x=%",
            ),
        ] {
            assert_eq!(without_password(url), want, "{url}");
        }
    }
}
