//! The audit trail's writer. A grant, a release or a break puts its event
//! (an `XADD` to the stream) in this locker's queue, and one thread, taken
//! when there is something to write and gone when the queue is empty,
//! writes them in order on the first instance. So a server that hangs or
//! refuses the write (on a Cluster, the node of the stream's slot, which
//! need not be the lock's) costs that thread its timeouts, never a lock
//! operation. At most [`MOST`] events wait; past that a new one is dropped
//! and logged, as is one whose write fails. A break waits for its own
//! event to be written (bounded: see [`RawLock::flush_trail`]), and so
//! does a read of the trail for the events queued before it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::Value;

use super::RawLock;

/// The most events waiting to be written, per locker.
pub(super) const MOST: usize = 1024;

/// One event to write: its command, and what a failure's log line names.
struct Item {
    cmd: redis::Cmd,
    action: String,
    key: String,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    /// The writer thread runs (it has an item in hand or will look again).
    running: bool,
    /// Events written, failed or dropped so far: what a flush waits for.
    done: u64,
    /// Events queued or dropped so far.
    queued: u64,
}

/// This locker's events waiting to be written.
#[derive(Default)]
pub(crate) struct Trail {
    queue: Mutex<Queue>,
    progress: Condvar,
}

impl RawLock {
    /// Queues `cmd` (the `action` of `key`) for the audit trail, and
    /// starts the writer unless it runs. Never waits on Redis. The number
    /// of the event, for [`flush_trail`](RawLock::flush_trail).
    pub(super) fn trail(self: &Arc<Self>, cmd: redis::Cmd, action: &str, key: &str) -> u64 {
        let mut q = self.trail.queue.lock();
        q.queued += 1;
        let number = q.queued;
        if q.items.len() >= MOST {
            q.done += 1;
            log::warn!(
                target: "redmutex::audit",
                "the {action} of {key:?} was not written to the audit trail: \
                 {MOST} events are waiting already"
            );
            return number;
        }
        q.items.push_back(Item {
            cmd,
            action: action.to_owned(),
            key: key.to_owned(),
        });
        if q.running {
            return number;
        }
        let this = Arc::clone(self);
        let spawned = thread::Builder::new()
            .name("redmutex-audit".into())
            .stack_size(128 * 1024)
            .spawn(move || this.write_trail());
        q.running = spawned.is_ok();
        if let Err(e) = spawned {
            let dropped = u64::try_from(q.items.len()).unwrap_or(u64::MAX);
            q.items.clear();
            q.done += dropped;
            log::warn!(
                target: "redmutex::audit",
                "the {action} of {key:?} was not written to the audit trail: \
                 no thread to write it: {e}"
            );
        }
        number
    }

    /// The writer: writes the queued events in order, each bounded by the
    /// checkout and I/O timeouts; ends when none is left.
    fn write_trail(&self) {
        loop {
            let item = {
                let mut q = self.trail.queue.lock();
                match q.items.pop_front() {
                    Some(item) => item,
                    None => {
                        q.running = false;
                        self.trail.progress.notify_all();
                        return;
                    }
                }
            };
            if let Err(e) = self.run_on(0, &mut |c| Ok(item.cmd.query::<Value>(c)?)) {
                log::warn!(
                    target: "redmutex::audit",
                    "the {} of {:?} was not written to the audit trail: {e}",
                    item.action,
                    item.key
                );
            }
            self.trail.queue.lock().done += 1;
            self.trail.progress.notify_all();
        }
    }

    /// Waits until the events up to number `upto` are written (or failed),
    /// at most `within`.
    pub(super) fn flush_trail(&self, upto: u64, within: Duration) {
        let deadline = Instant::now().checked_add(within);
        let mut q = self.trail.queue.lock();
        while q.done < upto {
            let timed_out = match deadline {
                Some(d) => self.trail.progress.wait_until(&mut q, d).timed_out(),
                None => {
                    self.trail.progress.wait(&mut q);
                    false
                }
            };
            if timed_out {
                return;
            }
        }
    }

    /// The number of the latest event queued.
    pub(super) fn trail_queued(&self) -> u64 {
        self.trail.queue.lock().queued
    }
}
