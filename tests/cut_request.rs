//! A request cut in the middle of its writing (a server that hangs while a
//! request larger than the socket buffers is sent: the write times out
//! with part of it sent) leaves a connection the server reads as that
//! request still coming: whatever is sent on it next is taken as the rest
//! of it (swallowed, or worse, completing it with other bytes). Such a
//! connection must never be used again (NOTES.md: discard a connection
//! after a timeout); once the server answers again, none of the locker's
//! connections may be left holding half a request.
#![allow(clippy::unwrap_used)] // test helpers fail loudly

mod common;

use std::time::Duration;

use common::{key, wait_until, Server};

const IO: Duration = Duration::from_millis(200);

/// Far more than loopback socket buffers take (a few MB each way), so a
/// hung server leaves the request cut.
const BIG: usize = 32 << 20;

/// How long the locker has, once the server answers again, to be rid of
/// the cut connection: its settling (thirty PINGs of one I/O timeout each,
/// 6 s here) with a generous margin for a loaded machine.
const RID_WITHIN: Duration = Duration::from_secs(40);

/// Whether a client of `server` holds half a request (bytes of a command
/// not yet whole: `qbuf` or `argv-mem` not zero), the `CLIENT LIST` asking
/// aside.
fn holds_half_a_request(server: &Server) -> bool {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    list.lines()
        .filter(|l| !l.contains("cmd=client|list"))
        .any(|l| {
            l.split(' ')
                .any(|f| matches!(f.split_once('='), Some(("qbuf" | "argv-mem", n)) if n != "0"))
        })
}

/// A guarded write whose request a hung server cut. The cut connection is
/// settled (`conn::settle`: thirty PINGs, each swallowed as more of the
/// cut request) and then goes back to the pool anyway, where the next
/// operation on it times out in turn (a renewal, an unlock: seen every
/// six seconds or so here). Redlock's requests written from the caller's
/// thread (`conn/sent.rs`, `Idle::send`) take the same path after a
/// write that timed out.
#[test]
#[ignore = "defect: a connection whose request a write timeout cut is settled and put back in \
            the pool, where it swallows later requests; redis-rs gives no way to close a sync \
            connection from the client's side, so the fix (closing it, or killing it by its \
            client id) is larger than this review"]
fn a_guarded_write_cut_by_a_hung_server_leaves_no_connection_half_sent() {
    let server = Server::start();
    let locker = server.locker_with_io(IO);
    let k = key("cut-guarded");
    let guard = locker.lock(&k).unwrap();
    let mut small = redis::pipe();
    small.set(format!("{k}:small"), 1);
    guard.run_if_held(&small).unwrap();
    let mut big = redis::pipe();
    big.set(format!("{k}:big"), vec![b'v'; BIG]);
    server.pause();
    let cut = guard.run_if_held(&big);
    server.resume();
    assert!(cut.is_err(), "a hung server took the whole request");
    wait_until(
        "no connection left holding half a request",
        RID_WITHIN,
        || !holds_half_a_request(&server),
    );
    drop(guard);
}
