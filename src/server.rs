//! What the locker needs of a server, and how a user is told at first use
//! when a server lacks it: the version, read from `INFO server` before a
//! locker's first acquisition on each instance, and scripting, read off the
//! first script call's error.

use redis::{ConnectionLike, RedisError, Value};

use crate::Error;

/// The oldest Redis version a locker supports, as `(major, minor)`.
///
/// The scripts need `ZPOPMIN` (Redis 5.0) and `SET ... KEEPTTL` (6.0);
/// 6.2 is the oldest version the test suite runs against. Every Valkey
/// release (from 7.2) is supported. A locker tells
/// [`Error::Unsupported`] on its first call to an older server.
///
/// ```
/// assert_eq!(redmutex::MIN_REDIS_VERSION, (6, 2));
/// ```
pub const MIN_REDIS_VERSION: (u32, u32) = (6, 2);

/// Reads the server's version with `INFO server` and refuses one older than
/// [`MIN_REDIS_VERSION`]. Only before an acquisition: a clean-up (a
/// release, leaving the queue) must never wait behind a check. A server (or
/// ACL user) that does not allow `INFO`
/// passes: the version is then left unchecked, as is one that cannot be
/// read. Through a cluster connection every node's answer is checked.
pub(crate) fn check_version(conn: &mut dyn ConnectionLike) -> Result<(), Error> {
    let info = match redis::cmd("INFO").arg("server").query::<Value>(conn) {
        Ok(info) => info,
        // An error reply (NOPERM, a renamed command): the server answered,
        // and the scripts will say whatever else is wrong.
        Err(e) if e.code().is_some() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut texts = Vec::new();
    collect_texts(&info, &mut texts);
    texts.iter().try_for_each(|text| version_supported(text))
}

/// Every text in a reply (a cluster's `INFO` is a map of node to text).
fn collect_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::BulkString(bytes) => out.push(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => out.push(s.clone()),
        Value::VerbatimString { text, .. } => out.push(text.clone()),
        Value::Array(items) | Value::Set(items) => {
            items.iter().for_each(|v| collect_texts(v, out));
        }
        Value::Map(pairs) => pairs.iter().for_each(|(_, v)| collect_texts(v, out)),
        _ => {}
    }
}

/// The decision on one server's `INFO server` text.
fn version_supported(info: &str) -> Result<(), Error> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
    };
    // Valkey also reports a `redis_version` (7.2.4), which it is newer than.
    if field("valkey_version").is_some() {
        return Ok(());
    }
    let Some(version) = field("redis_version") else {
        return Ok(());
    };
    let mut parts = version.split('.').map(str::parse::<u32>);
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        return Ok(());
    };
    if (major, minor) < MIN_REDIS_VERSION {
        let (min_major, min_minor) = MIN_REDIS_VERSION;
        return Err(Error::Unsupported {
            reason: format!(
                "Redis {version} is older than {min_major}.{min_minor}, \
                 the oldest version redmutex supports"
            ),
        });
    }
    Ok(())
}

/// The typed error for a script call the server refused to run at all:
/// scripting switched off (`EVAL`/`EVALSHA` renamed away), no Lua engine
/// (Valkey 9.1 can run without one), or an ACL user without the scripting
/// commands. `None` for every other error.
///
/// The server's own text is not repeated: it quotes the command's first
/// arguments, which may include an owner token.
pub(crate) fn scripting_refused(e: &RedisError) -> Option<Error> {
    let detail = e.detail()?.to_ascii_lowercase();
    let scripting = quoted_command(&detail).is_some_and(|c| {
        [
            "eval",
            "evalsha",
            "eval_ro",
            "evalsha_ro",
            "script",
            "script|load",
        ]
        .contains(&c)
    });
    let reason = if e.code() == Some("NOPERM") && scripting {
        "the ACL user may not run EVAL/EVALSHA (see the README's ACL recipe)"
    } else if detail.starts_with("unknown command") && scripting {
        "scripting is switched off on the server (EVAL/EVALSHA are unknown commands)"
    } else if detail.contains("scripting engine") || detail.contains("engine 'lua'") {
        "the server has no Lua scripting engine"
    } else {
        return None;
    };
    Some(Error::Unsupported {
        reason: format!("it cannot run the lock's scripts: {reason}"),
    })
}

/// The first command name quoted in a server's error text: Redis 7 and
/// Valkey quote with `'`, Redis 6.2 with backticks.
fn quoted_command(detail: &str) -> Option<&str> {
    let start = detail.find(['\'', '`'])? + 1;
    let rest = detail.get(start..)?;
    let end = rest.find(['\'', '`'])?;
    rest.get(..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(lines: &[&str]) -> String {
        let mut s = String::from("# Server\r\n");
        for l in lines {
            s.push_str(l);
            s.push_str("\r\n");
        }
        s
    }

    #[test]
    fn versions_from_the_oldest_supported_on_pass() {
        for v in ["6.2.0", "6.2.14", "7.0.15", "7.4.1", "8.0.0", "10.1.2"] {
            assert!(
                version_supported(&info(&[&format!("redis_version:{v}")])).is_ok(),
                "{v}"
            );
        }
        let valkey = info(&[
            "redis_version:7.2.4",
            "server_name:valkey",
            "valkey_version:9.1.2",
        ]);
        assert!(version_supported(&valkey).is_ok());
    }

    #[test]
    fn older_versions_are_refused_with_the_reason() {
        for v in ["6.0.16", "5.0.14", "4.0.9", "2.8.24"] {
            let text = info(&[&format!("redis_version:{v}")]);
            match version_supported(&text) {
                Err(Error::Unsupported { reason }) => {
                    assert!(reason.contains(v) && reason.contains("6.2"), "{reason}");
                }
                other => panic!("{v}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_unreadable_version_is_not_refused() {
        assert!(version_supported("").is_ok());
        assert!(version_supported(&info(&["redis_version:unknown"])).is_ok());
    }

    #[test]
    fn cluster_answers_are_checked_node_by_node() {
        let reply = Value::Map(vec![
            (
                Value::SimpleString("a".into()),
                Value::VerbatimString {
                    format: redis::VerbatimFormat::Text,
                    text: info(&["redis_version:7.0.15"]),
                },
            ),
            (
                Value::SimpleString("b".into()),
                Value::BulkString(info(&["redis_version:5.0.7"]).into_bytes()),
            ),
        ]);
        let mut texts = Vec::new();
        collect_texts(&reply, &mut texts);
        assert_eq!(texts.len(), 2);
        assert!(texts.iter().try_for_each(|t| version_supported(t)).is_err());
    }

    #[test]
    fn only_refusals_of_scripting_are_told_as_unsupported() {
        let parse = |line: &str| -> RedisError {
            redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
                .and_then(|v| v.extract_error())
                .expect_err("an error reply")
        };
        for line in [
            "ERR unknown command 'EVALSHA', with args beginning with: 'abc' 'token'",
            "ERR unknown command `EVALSHA`, with args beginning with: `abc`, `token`, ",
            "NOPERM this user has no permissions to run the 'evalsha' command or its subcommand",
            "NOPERM User app has no permissions to run the 'evalsha' command",
            "ERR Could not find scripting engine 'LUA'",
        ] {
            let e = scripting_refused(&parse(line)).expect(line);
            assert!(!e.to_string().contains("token"), "{e}");
        }
        for line in [
            "NOSCRIPT No matching script",
            "NOPERM No permissions to access a key",
            "ERR unknown command 'FOO'",
            "ERR unknown command `evaluate`, with args beginning with: ",
            "ERR Error running script: user_script:1: oops",
        ] {
            assert!(scripting_refused(&parse(line)).is_none(), "{line}");
        }
    }
}
