//! Guarded writes and fences given odd input (a hostile review of issue 33
//! items 1 and 2): commands the server would refuse only once their turn
//! came, commands that touch the lock's keys without naming them, binary
//! keys on a Cluster, fenced commands that touch the fence, huge pipelines.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)] // test helpers fail loudly: that is the point

mod common;

use std::time::{Duration, Instant};

use common::{key, Server};
use redis::Value;

/// A pipeline of many commands, one of them marked `ignore()`: the reply
/// is read in time linear in the commands, not quadratic.
#[test]
fn a_huge_pipeline_with_an_ignored_command_is_read_in_linear_time() {
    let server = Server::start();
    let locker = server.locker();
    let (k, count) = (key("o-huge"), key("o-huge-count"));
    let guard = locker.lock(&k).unwrap();
    let n = 150_000;
    let mut p = redis::pipe();
    p.incr(&count, 1).ignore();
    for _ in 1..n {
        p.incr(&count, 1);
    }
    let start = Instant::now();
    let replies = guard.run_if_held(&p).unwrap();
    let took = start.elapsed();
    assert_eq!(replies.len(), n - 1);
    assert_eq!(replies.last(), Some(&Value::Int(i64::try_from(n).unwrap())));
    // Two round trips and a script of 150,000 INCRs take well under a
    // second here; the quadratic read took tens of seconds.
    assert!(took < Duration::from_secs(8), "took {took:?}");
}
