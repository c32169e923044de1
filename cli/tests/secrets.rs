//! A password in the URL is never printed, wherever it stands in the URL
//! and whatever the server says back: not in the URL the command names,
//! not in the log lines of `-v`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use redmutex_testkit::ThrowAwayServer;

/// A Unix socket URL's `pass` query parameter percent-encoded in its name
/// (`p%61ss`): redis-rs decodes the name and sends the password, so the
/// URL the command names must not show it.
#[test]
fn a_percent_encoded_password_parameter_is_not_shown() {
    let s = setup("secrets-url");
    let dir = s.dir.to_string_lossy().into_owned();
    for url in [
        format!("unix://{dir}/none.sock?p%61ss=s3cret"),
        format!("redis+unix://{dir}/none.sock?db=0&%70ass=s3cret"),
        format!("unix://{dir}/none.sock?PA%53S=s3cret"),
    ] {
        let mut cmd = s.cmd(&["holder", "k"]);
        cmd.env("REDIS_URL", &url);
        let out = cmd.output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 69, "{url}: {out:?}");
        assert!(said.contains("none.sock"), "{url}: {said}");
        assert!(
            !said.contains("s3cret"),
            "{url}: the password shown: {said}"
        );
    }
}

/// A server that does not know HELLO (renamed away; or older than
/// Redis 6) answers `protocol=resp3`'s `HELLO 3 AUTH <user> <password>`
/// with an error that quotes its arguments (Redis), or with NOAUTH
/// (Valkey, to any command it does not know before AUTH). The command's
/// own message leaves the arguments out and names HELLO; its `-v` log
/// lines (r2d2's connection errors) must leave them out too.
#[test]
fn the_server_quoting_the_handshake_is_not_repeated_by_verbose() {
    let s = setup("secrets-verbose");
    let server = ThrowAwayServer::start(
        &["--requirepass", "hunter2", "--rename-command", "HELLO", ""],
        Duration::from_secs(20),
    )
    .unwrap();
    let url = format!(
        "redis://default:hunter2@127.0.0.1:{}/?protocol=resp3",
        server.port()
    );
    for args in [&["run", "-v", "k", "--", "true"][..], &["holder", "k"]] {
        let mut cmd = s.cmd(args);
        cmd.env("REDIS_URL", &url);
        let out = cmd.output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 69, "{args:?}: {out:?}");
        assert!(said.contains("HELLO"), "{args:?}: {said}");
        assert!(
            !said.contains("hunter2"),
            "{args:?}: the password shown: {said}"
        );
    }
}
