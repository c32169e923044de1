//! The command's options: defaults that follow the TTL, and a `--help`
//! that tells no secret.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

/// A short `--ttl` alone works: the kill grace follows it. Only a
/// `--kill-grace` given explicitly that cannot work is a usage error.
#[test]
fn a_short_ttl_alone_works_and_only_an_explicit_grace_is_refused() {
    let s = setup("ttl");
    for ttl in ["3s", "10s", "1s"] {
        let out = s.run(&["run", "--ttl", ttl, "tkey", "--", "true"]);
        assert_eq!(code(&out), 0, "--ttl {ttl}: {out:?}");
    }
    // Renewed past its TTL, and not stopped on the way.
    let out = s.run(&["run", "--ttl", "1s", "tkey", "--", "sleep", "1.5"]);
    assert_eq!(code(&out), 0, "{out:?}");
    let out = s.run(&[
        "run",
        "--ttl",
        "3s",
        "--kill-grace",
        "2s",
        "tkey",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 64, "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--kill-grace"), "{err}");
}
