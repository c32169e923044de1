//! Redlock: releases that could not reach a master, sent again once it
//! answers; releases sent again for a while where a renewal may still
//! arrive.
//!
//! A master that hangs for a moment across an unlock keeps our key while
//! the others delete it; every later grant would meet it there as a
//! rival's and give up, for the rest of the TTL. So a guard's release that
//! failed on a master for want of a connection (a timeout, a refused or
//! skipped call), or that the master refused for a moment (`BUSY` while a
//! script runs past the busy threshold, `LOADING` while it restarts,
//! `NOREPLICAS`, `READONLY`: see `quorum::refused_for_a_moment`), is
//! kept here, and one thread per such master sends it
//! again, owner-checked as every release is, after [`PAUSE`] (doubling up
//! to [`LONGEST_PAUSE`] while the master does not answer) until the
//! master answers, past its breaker (a try costs this thread, not a
//! caller, its timeout; an answer closes the breaker), for as long as the
//! key left there can live: the locker's TTL, or the longest TTL a
//! renewal gave it (a guard extended beyond the locker's TTL); the key
//! expires by then.
//!
//! A renewal (or the write-back) that timed out on a stalled connection
//! may still arrive after the release, and puts our key back there (a
//! renewal repairs a missing key), for a whole TTL. So where one of those
//! failed, the release is kept even when it was answered, and sent again
//! after each pause (growing to [`LONGEST_PAUSE`]) for [`STALE_TTLS`] TTLs:
//! as long as a stalled connection is kept settling (thirty I/O timeouts,
//! three TTLs in Redlock) and the TTL of what it may put back (the longest
//! a renewal asked for, when longer than the locker's).
//!
//! At most [`MOST`] releases are kept per master (beyond that the oldest is
//! left to its TTL). Only a guard's own release is kept: its owner token is
//! never used again, so deleting the keys that still carry it is always
//! safe, whenever it happens. (A failed attempt's clean-up is not: the
//! next attempt of the same acquisition uses the same token.)

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionLike, Value};

use super::{Acquisition, RawLock};
use crate::protocol::scripts;
use crate::quorum;
use crate::time;

/// How soon a master that did not answer a release is tried again; the
/// pause doubles, up to [`LONGEST_PAUSE`], each time it still does not
/// answer (a try of a hung master costs a timeout, and leaves its
/// connection settling).
pub(super) const PAUSE: Duration = Duration::from_millis(100);
pub(super) const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// The most releases kept per master.
pub(super) const MOST: usize = 1024;

/// For how many TTLs a release is sent again where a renewal may still
/// arrive.
pub(super) const STALE_TTLS: u32 = 4;

/// A release kept: the moment it is given up, and whether it is sent until
/// then even once answered (a renewal may still arrive).
struct Item {
    a: Arc<Acquisition>,
    until: Instant,
    repeat: bool,
}

/// One master's releases to send again, and whether its thread runs.
#[derive(Default)]
struct Queue {
    items: Vec<Item>,
    running: bool,
}

/// Per master, the releases that did not reach it, or that a late renewal
/// may undo there.
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
    /// Keeps the release of `a` (a guard's) to send again to master `i`
    /// (`repeat`: until it is given up, even once answered), and starts
    /// that master's thread unless it runs.
    pub(super) fn release_later(self: &Arc<Self>, i: usize, a: &Arc<Acquisition>, repeat: bool) {
        let Some(queue) = self.later.queues.get(i) else {
            return;
        };
        // The key left there lives at most the longest TTL a renewal gave it
        // (an `extend` may have made it longer than the locker's); what a
        // stalled call may still put back, as long after it settles.
        let longest = a.longest_ttl(self.config.ttl);
        let keep = if repeat {
            self.config
                .ttl
                .saturating_mul(STALE_TTLS - 1)
                .saturating_add(longest)
        } else {
            longest
        };
        let Some(until) = time::deadline(Instant::now(), keep) else {
            return;
        };
        let mut q = queue.lock();
        if q.items.len() >= MOST {
            q.items.remove(0);
        }
        q.items.push(Item {
            a: Arc::clone(a),
            until,
            repeat,
        });
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
            let batch: Vec<(Arc<Acquisition>, bool)> = {
                let mut q = queue.lock();
                let now = Instant::now();
                q.items.retain(|item| now < item.until);
                if q.items.is_empty() {
                    q.running = false;
                    return;
                }
                q.items
                    .iter()
                    .map(|item| (Arc::clone(&item.a), item.repeat))
                    .collect()
            };
            let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
            for (a, repeat) in batch {
                let owner = a.owner();
                let unmark = !self.lock_delay(&a.keys).is_zero();
                let call = scripts::release(&a.keys, owner.as_str(), "", false, unmark);
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
                    // Still out of reach, or refusing (busy, loading): the
                    // others wait for the next round.
                    Err(e) if quorum::unanswered(&e) => break,
                    // Sent again after each (growing) pause until given up.
                    _ if repeat => {}
                    // Answered (or refused for good): done with it, and
                    // the next round (releases kept meanwhile) comes soon.
                    _ => {
                        queue.lock().items.retain(|item| !Arc::ptr_eq(&item.a, &a));
                        wait = PAUSE;
                    }
                }
            }
        }
    }
}
