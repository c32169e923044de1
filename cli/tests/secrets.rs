//! A password in the URL is never printed, wherever it stands in the URL
//! and whatever the server says back: not in the URL the command names,
//! not in the log lines of `-v`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

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
