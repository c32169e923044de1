//! Redlock: releases that could not reach a master, sent again once it
//! answers.
//!
//! A master that hangs for a moment across an unlock keeps our key while
//! the others delete it; every later grant would meet it there as a
//! rival's and give up, for the rest of the TTL. So a guard's release that
//! failed on a master for want of a connection (a timeout, a refused or
//! skipped call) is kept here, and one thread per such master sends it
//! again, owner-checked as every release is, after [`PAUSE`] (doubling up
//! to [`LONGEST_PAUSE`] while the master does not answer) until the
//! master answers, past its breaker (a try costs this thread, not a
//! caller, its timeout; an answer closes the breaker), for at most the TTL
//! (the key expires by then) and at
//! most [`MOST`] releases per master (beyond that the oldest is left to its
//! TTL). Only a guard's own release is kept: its owner token is never used
//! again, so deleting the keys that still carry it is always safe, whenever
//! it happens. (A failed attempt's clean-up is not: the next attempt of the
//! same acquisition uses the same token.)

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionLike, Value};

use super::{Acquisition, RawLock};
use crate::protocol::scripts;
use crate::time;

/// How soon a master that did not answer a release is tried again; the
/// pause doubles, up to [`LONGEST_PAUSE`], each time it still does not
/// answer (a try of a hung master costs a timeout, and leaves its
/// connection settling).
pub(super) const PAUSE: Duration = Duration::from_millis(100);
pub(super) const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// The most releases kept per master.
pub(super) const MOST: usize = 1024;

/// One master's releases to send again, and whether its thread runs.
#[derive(Default)]
struct Queue {
    /// Each with the moment it is given up (its keys have expired by then).
    items: Vec<(Arc<Acquisition>, Instant)>,
    running: bool,
}

/// Per master, the releases that did not reach it.
pub(crate) struct Later {
    queues: Vec<Mutex<Queue>>,
}

impl Later {
    pub(crate) fn new(instances: usize) -> Later {
        Later {
            queues: (0..instances).map(|_| Mutex::default()).collect(),
        }
    }
}

impl RawLock {
    /// Keeps the release of `a` (a guard's) to send again to master `i`,
    /// and starts that master's thread unless it runs.
    pub(super) fn release_later(self: &Arc<Self>, i: usize, a: &Arc<Acquisition>) {
        let Some(queue) = self.later.queues.get(i) else {
            return;
        };
        let Some(until) = time::deadline(Instant::now(), self.config.ttl) else {
            return;
        };
        let mut q = queue.lock();
        if q.items.len() >= MOST {
            q.items.remove(0);
        }
        q.items.push((Arc::clone(a), until));
        if q.running {
            return;
        }
        let this = Arc::clone(self);
        let spawned = thread::Builder::new()
            .name("redmutex-release".into())
            .stack_size(128 * 1024)
            .spawn(move || this.release_again(i));
        // Without a thread the keys there wait for their TTL, as they did.
        q.running = spawned.is_ok();
        if !q.running {
            q.items.clear();
        }
    }

    /// Master `i`'s thread: after each pause, sends the kept releases again,
    /// each until the master answers it or it is given up; ends when none
    /// is left.
    fn release_again(&self, i: usize) {
        let Some(queue) = self.later.queues.get(i) else {
            return;
        };
        // A pause is a wait on a channel nobody sends to.
        let (_keep, pause) = mpsc::channel::<()>();
        let mut wait = PAUSE;
        loop {
            let _ = pause.recv_timeout(wait);
            wait = (wait * 2).min(LONGEST_PAUSE);
            let batch: Vec<Arc<Acquisition>> = {
                let mut q = queue.lock();
                let now = Instant::now();
                q.items.retain(|(_, until)| now < *until);
                if q.items.is_empty() {
                    q.running = false;
                    return;
                }
                q.items.iter().map(|(a, _)| Arc::clone(a)).collect()
            };
            let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
            for a in batch {
                let owner = a.owner();
                let call = scripts::release(&a.keys, owner.as_str(), "", false);
                let mut op = |c: &mut dyn ConnectionLike| Ok(call.invoke::<Value>(c)?);
                let result = self
                    .instance(i)
                    .and_then(|master| master.run(checkout, io, &mut op, None));
                if result.is_ok() {
                    if let Some(breaker) = self.breakers.get(i) {
                        breaker.reset();
                    }
                }
                match result {
                    // Still out of reach: the others wait for the next round.
                    Err(e) if e.is_connection() => break,
                    // Answered (or refused for good): done with it, and
                    // the next round (releases kept meanwhile) comes soon.
                    _ => {
                        queue.lock().items.retain(|(b, _)| !Arc::ptr_eq(b, &a));
                        wait = PAUSE;
                    }
                }
            }
        }
    }
}
