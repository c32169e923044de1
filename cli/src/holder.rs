//! `redmutex holder`: who holds a lock, and how many wait for it.

use std::time::Duration;

use redmutex::{r2d2, redis, LockInfo};

/// How long a connection may be waited for.
const CHECKOUT: Duration = Duration::from_secs(2);

/// The number of live waiters queued for `key`: entries of its waiters'
/// hash (`<prefix>:__redmutex__:waiters:<key>`, see the library's
/// `protocol/keys.rs`) whose stay has not run out on the server's clock.
/// Only the entries' values are read: their fields are owner tokens.
pub fn waiters(
    pool: &r2d2::Pool<redis::Client>,
    prefix: Option<&str>,
    key: &str,
) -> Result<u64, String> {
    let name = match prefix {
        Some(p) => format!("{p}:__redmutex__:waiters:{key}"),
        None => format!("__redmutex__:waiters:{key}"),
    };
    let mut conn = pool
        .get_timeout(CHECKOUT)
        .map_err(|e| format!("no redis connection: {e}"))?;
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query(&mut *conn)
        .map_err(|e| format!("redis command failed: {e}"))?;
    let now = secs.saturating_mul(1000).saturating_add(micros / 1000);
    let entries: Vec<String> = redis::cmd("HVALS")
        .arg(&name)
        .query(&mut *conn)
        .map_err(|e| format!("redis command failed: {e}"))?;
    let live = entries.iter().filter(|e| alive(e, now)).count();
    Ok(u64::try_from(live).unwrap_or(u64::MAX))
}

/// Whether a waiter's entry `<ms>:<stay ms>:...` is still in its stay at
/// `now` (ms, server clock), as the library's scripts decide it.
fn alive(entry: &str, now: u64) -> bool {
    let mut parts = entry.splitn(3, ':');
    let at = parts.next().and_then(|p| p.parse::<u64>().ok());
    let stay = parts.next().and_then(|p| p.parse::<u64>().ok());
    match (at, stay) {
        (Some(at), Some(stay)) => at.saturating_add(stay) >= now,
        _ => false,
    }
}

/// The answer for people, one line.
pub fn text(info: Option<&LockInfo>, waiters: u64) -> String {
    match info {
        Some(info) => format!(
            "held by {:?}, {} ms left, fencing token {}, {waiters} waiting\n",
            info.metadata(),
            info.ttl().as_millis(),
            info.fencing_token()
        ),
        None => "free\n".to_owned(),
    }
}

/// The answer for programs, one JSON object on one line.
pub fn json(key: &str, info: Option<&LockInfo>, waiters: u64) -> String {
    let (holder, left, token) = match info {
        Some(i) => (
            string(i.metadata()),
            i.ttl().as_millis().to_string(),
            i.fencing_token().to_string(),
        ),
        None => ("null".to_owned(), "null".to_owned(), "null".to_owned()),
    };
    format!(
        "{{\"key\":{},\"holder\":{holder},\"ms_left\":{left},\"fencing_token\":{token},\
         \"waiters\":{waiters}}}\n",
        string(key)
    )
}

/// `text` as a JSON string.
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(string("a\"b\\c\nd"), r#""a\"b\\c\u000ad""#);
    }

    #[test]
    fn a_waiter_is_alive_until_its_stay_ends() {
        assert!(alive("1000:500:30000:host:1", 1500));
        assert!(!alive("1000:500:30000:host:1", 1501));
        assert!(!alive("garbage", 0));
    }
}
