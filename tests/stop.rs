//! `Locker::lock_or_stop`: a waiter called off gives up within a backoff
//! pause and leaves nothing in Redis.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{key, queue_keys, wait_until, Server};

#[test]
fn a_waiter_called_off_leaves_the_queue_and_nothing_behind() {
    let server = Server::start();
    let (holder, waiter) = (server.locker(), server.locker());
    let k = key("stop");
    let held = holder.lock(&k).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let before = server.evalsha_calls();
    let t = {
        let (waiter, k, stop) = (waiter.clone(), k.clone(), Arc::clone(&stop));
        std::thread::Builder::new()
            .spawn(move || waiter.lock_or_stop(&k, None, &stop))
            .unwrap()
    };
    wait_until("the waiter's attempts", Duration::from_secs(20), || {
        server.evalsha_calls() >= before + 2
    });
    let (queue, _) = queue_keys(None, &k);
    let queued: u64 = redis::Commands::zcard(&mut server.conn(), &queue).unwrap();
    assert_eq!(queued, 1, "it waits in the queue");
    stop.store(true, Ordering::SeqCst);
    let got = t.join().unwrap();
    assert!(
        matches!(got, Err(redmutex::Error::Cancelled { ref key }) if *key == k),
        "{got:?}"
    );
    let queued: u64 = redis::Commands::zcard(&mut server.conn(), &queue).unwrap();
    assert_eq!(queued, 0, "it left the queue");
    drop(held);
    // The release found nobody to hand the lock to: it is free.
    assert!(waiter.try_lock(&k).unwrap().is_some());
}
