//! A server's refusal read from its words: a handshake command it does not
//! know, a database it does not have, credentials it refuses. Read for
//! `error.rs`, where redis-rs's and r2d2's errors become ours, and for
//! `open`'s check.

use redis::{ErrorKind, RedisError};

use super::Error;

/// [`Error::Unsupported`] when `text` (a redis-rs error's, or the one r2d2
/// keeps) is the server's "unknown command" for a command of the
/// connection's handshake. Redis quotes that command's first arguments, the
/// password among them, so the text itself must go nowhere.
pub(crate) fn handshake_unknown(text: &str) -> Option<Error> {
    // redis-rs says it in its own words for Redis 6's form of the error
    // (but not for Redis 7's, whose text quotes the password).
    let lower = if text.contains("RESP3NotSupported") {
        "unknown command 'hello'".to_owned()
    } else {
        text.to_ascii_lowercase()
    };
    let (_, after) = lower.split_once("unknown command")?;
    // Redis 7 and Valkey quote with `'`, Redis 6 with backticks.
    let reason = match after.split(['\'', '`']).nth(1)? {
        "hello" => {
            "it does not know HELLO, which `protocol=resp3` in the URL needs \
             (a server before Redis 6, or the command renamed): leave that out"
        }
        "auth" => "it does not know AUTH (the command renamed), which a password needs",
        _ => return None,
    };
    Some(Error::Unsupported {
        reason: reason.to_owned(),
    })
}

/// Said when the server refused the URL's database: redis-rs's words for a
/// refused `SELECT` in the handshake, and the reason given.
const SELECT_REFUSED: &str = "refused to switch database";
const NO_DATABASE: &str = "the server refused the database (the path after the host): it has \
                           fewer (`databases` in its configuration), or it is a Cluster node \
                           (use `Locker::open_cluster`, without a database)";

/// Why the URL cannot work, when `text` (a redis-rs error's, or the one
/// r2d2 keeps) says the server refused its database.
pub(crate) fn database_refused(text: &str) -> Option<&'static str> {
    text.contains(SELECT_REFUSED).then_some(NO_DATABASE)
}

/// Said when a server wants a password and got none.
const REQUIRES: &str = "the server requires a password (redis://:password@host/, or \
                        redis://user:password@host/ for an ACL user)";
/// Said for NOAUTH, which also answers a URL with a password: Valkey says
/// it to any command it does not know before AUTH, a renamed HELLO among
/// them (where Redis says "unknown command", read above).
const REQUIRES_OR_NO_HELLO: &str = "the server requires a password (redis://:password@host/, or \
                                    redis://user:password@host/ for an ACL user); with one in \
                                    the URL, it does not know HELLO, which sends it under \
                                    `protocol=resp3` (the command renamed): leave that out";
/// Said when a server refused the one it got.
const REFUSED: &str = "wrong user name or password, or a disabled user";
/// Said when redis-rs reports a refused `AUTH` without the server's words:
/// the server may also have no password at all ("AUTH called without any
/// password configured").
const REFUSED_OR_NONE: &str = "wrong user name or password, a disabled user, or a password \
                               sent to a server without one";

/// What Redis (and Valkey) say after `NOAUTH`.
const NOAUTH_WORDS: &str = "Authentication required";

/// Why the server refused to authenticate, when `e` says it did.
pub(crate) fn auth_reason(e: &RedisError) -> Option<&'static str> {
    match e.code() {
        Some("NOAUTH") => Some(REQUIRES_OR_NO_HELLO),
        Some("WRONGPASS") => Some(REFUSED),
        _ if e.kind() == ErrorKind::AuthenticationFailed => Some(REFUSED_OR_NONE),
        // Redis's answer to a long command before AUTH (it then closes).
        _ if e.detail().is_some_and(|d| d.contains("unauthenticated")) => Some(REQUIRES),
        // NOAUTH's words without its code: redis-rs's "refused to switch
        // database" when the URL names one.
        _ if e.detail().is_some_and(|d| d.contains(NOAUTH_WORDS)) => Some(REQUIRES),
        _ => None,
    }
}

/// The same, from the text r2d2 keeps of the last connection error (the
/// text of a redis-rs error; a password is never part of it).
pub(crate) fn auth_reason_in_text(text: &str) -> Option<&'static str> {
    if text.contains("NOAUTH") {
        Some(REQUIRES_OR_NO_HELLO)
    } else if text.contains("unauthenticated") || text.contains(NOAUTH_WORDS) {
        Some(REQUIRES)
    } else if text.contains("WRONGPASS") {
        Some(REFUSED)
    } else if text.contains("AuthenticationFailed") {
        Some(REFUSED_OR_NONE)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Valkey answers NOAUTH to a command it does not know before AUTH: to
    /// a renamed HELLO too, the command that sends the URL's password with
    /// `protocol=resp3`. Its reason must name that case beside the missing
    /// password.
    #[test]
    fn noauth_names_a_hello_the_server_does_not_know() {
        let e = redis::make_extension_error(
            "NOAUTH".to_owned(),
            Some("Authentication required.".to_owned()),
        );
        let texts = [
            auth_reason(&e),
            auth_reason_in_text(
                "timed out waiting for connection: \"NOAUTH\": Authentication required.",
            ),
        ];
        for reason in texts {
            let reason = reason.unwrap_or_default();
            assert!(reason.contains("requires a password"), "{reason}");
            assert!(
                reason.contains("HELLO") && reason.contains("protocol=resp3"),
                "{reason}"
            );
        }
    }
}
