//! What the locker needs of a server, told at first use: a server (or an
//! ACL user) that cannot run scripts gets a clear, typed error on the first
//! lock, not a Redis error from deep inside a script call. The version
//! check's decision is unit-tested in `src/server.rs` (no server older than
//! the oldest supported one can be installed here to refuse for real).
#![allow(clippy::disallowed_methods, clippy::unwrap_used)] // test helpers fail loudly: that is the point

mod common;

use common::{key, Server};
use redmutex::Locker;

/// The error of the first lock, and of a `try_lock` after it.
fn first_errors(url: &str) -> Vec<redmutex::Error> {
    let locker = Locker::new(redmutex::pool(url).unwrap());
    let k = key("servers");
    let lock = locker.lock(&k).err().unwrap();
    let try_lock = locker.try_lock(&k).err().unwrap();
    vec![lock, try_lock]
}

fn assert_scripting_told(errors: &[redmutex::Error]) {
    for e in errors {
        let said = e.to_string();
        assert!(
            said.contains("cannot run the lock's scripts"),
            "not told that scripts cannot run: {said} ({e:?})"
        );
    }
}

#[test]
fn a_server_without_scripting_is_told_at_first_lock() {
    // What an operator who switched scripting off leaves: no EVAL, no EVALSHA.
    let server = Server::start_with(&[
        "--rename-command",
        "EVALSHA",
        "",
        "--rename-command",
        "EVAL",
        "",
    ]);
    assert_scripting_told(&first_errors(&server.url()));
}

#[test]
fn a_user_without_scripting_rights_is_told_at_first_lock() {
    let server = Server::start();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg(&["on", ">secret", "~*", "&*", "+@all", "-@scripting"])
        .exec(&mut server.conn())
        .unwrap();
    let url = format!("redis://app:secret@127.0.0.1:{}/", server.port());
    assert_scripting_told(&first_errors(&url));
}
