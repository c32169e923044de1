//! The audit trail: its events written and read back. A grant, a release
//! or a break puts its event (an `XADD` to the stream) in this locker's
//! queue, and one thread, taken when there is something to write and gone
//! when the queue is empty, writes them in order on the first instance. So
//! a server that hangs or refuses the write (on a Cluster, the node of the
//! stream's slot, which need not be the lock's) costs that thread its
//! timeouts, never a lock operation. At most [`MOST`] events wait; past
//! that a new one is dropped and logged, as is one whose write fails. A
//! break waits for its own event to be written (bounded: see
//! [`RawLock::flush_trail`]), and so does a read of the trail for the
//! events queued before it.
//!
//! Lockers write their events when their threads get to it, so the stream
//! does not keep the server's order (the next holder's grant can be written
//! before the previous holder's release). A read puts it back
//! ([`server_order`]): the fencing tokens of one hold's key rise with each
//! grant, so its events ordered by token, a grant before the release or
//! break of the same token, are in the order the server made them.
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};
use redis::Value;

use crate::defaults::AUDIT_LEN;
use crate::info::{AuditEntry, LockInfo, LockKind};
use crate::protocol::keys::KeySpace;
use crate::protocol::replies;
use crate::Error;

use super::{Acquisition, RawLock};

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

impl RawLock {
    /// With [`Builder::audit`](crate::Builder::audit) on: `action` (`grant`,
    /// `release`) of the hold `a`, with fencing token `fence`, to the audit
    /// trail, one event per key, with the metadata its keys carry (a
    /// leader's: the value it campaigned with, or proclaimed last), as a
    /// listing shows it.
    pub(crate) fn audit_held(self: &Arc<Self>, a: &Acquisition, fence: u64, action: &str) {
        if !self.config.audit {
            return;
        }
        let cluster = self.config.topology.is_cluster();
        let proclaimed = a.proclaimed.lock().clone();
        let metadata = proclaimed
            .as_deref()
            .or(a.metadata.as_deref())
            .unwrap_or(&self.config.metadata);
        for key in a.keys.locks.iter() {
            let Some(hold) = self.config.keys.named(key, cluster) else {
                continue;
            };
            let info = replies::named(LockInfo::blank(), &hold);
            self.audit(&Event {
                action,
                key: &info.key,
                kind: info.kind,
                metadata,
                fence,
                reason: "",
            });
        }
    }

    /// Queues `event` for this prefix's audit trail on the first instance,
    /// best effort: written by the trail's own thread, a failure logged,
    /// never waited for here. Its number in the queue.
    pub(super) fn audit(self: &Arc<Self>, event: &Event<'_>) -> u64 {
        self.audit_to(&self.config.keys.audit_key(), event)
    }

    /// As [`audit`](RawLock::audit), to the audit trail `stream` (another
    /// prefix's, for a break of a hold under it).
    pub(super) fn audit_to(self: &Arc<Self>, stream: &str, event: &Event<'_>) -> u64 {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(stream)
            .arg("MAXLEN")
            .arg("~")
            .arg(AUDIT_LEN)
            .arg("*")
            .arg("action")
            .arg(event.action)
            .arg("key")
            .arg(event.key)
            .arg("kind")
            .arg(event.kind.as_str())
            .arg("metadata")
            .arg(event.metadata)
            .arg("fence")
            .arg(event.fence)
            .arg("reason")
            .arg(event.reason);
        self.trail(cmd, event.action, event.key)
    }

    /// This prefix's audit trail from the millisecond of `since` on (all of
    /// it with `None`), oldest first and each hold's events in the server's
    /// order (see [`server_order`]), read from the first instance once this
    /// locker's queued events are written (waiting at most the checkout
    /// and I/O timeouts for them).
    pub(crate) fn read_audit(&self, since: Option<SystemTime>) -> Result<Vec<AuditEntry>, Error> {
        self.flush_own_trail();
        self.read_trail(&self.config.keys, since)
    }

    /// As [`read_audit`](RawLock::read_audit), every audit trail of this
    /// prefix and of the prefixes nested in it (found by a walk, see
    /// [`trails`](RawLock::trails)), each event with its prefix, in the
    /// order of their times (each trail's events in their order).
    pub(crate) fn read_audits(&self, since: Option<SystemTime>) -> Result<Vec<AuditEntry>, Error> {
        self.flush_own_trail();
        let mut all = Vec::new();
        for space in self.trails()? {
            all.extend(self.read_trail(&space, since)?);
        }
        // Stable: a trail's events keep their order.
        all.sort_by_key(|e| e.time);
        Ok(all)
    }

    /// Waits until this locker's events queued so far are written, at most
    /// the checkout and I/O timeouts.
    fn flush_own_trail(&self) {
        let bound = self
            .config
            .checkout_timeout
            .saturating_add(self.config.io_timeout);
        self.flush_trail(self.trail_queued(), bound);
    }

    /// The audit trail of the prefix `space` from the millisecond of
    /// `since` on, in the server's order (see [`server_order`]).
    fn read_trail(
        &self,
        space: &KeySpace,
        since: Option<SystemTime>,
    ) -> Result<Vec<AuditEntry>, Error> {
        let start = match since {
            Some(t) => {
                let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
                ms.to_string()
            }
            None => "-".to_owned(),
        };
        let stream = space.audit_key();
        let reply = self.run_on(0, &mut |c| {
            Ok(redis::cmd("XRANGE")
                .arg(&stream)
                .arg(&start)
                .arg("+")
                .arg("COUNT")
                .arg(AUDIT_LEN.saturating_mul(2))
                .query::<Value>(c)?)
        })?;
        // Read from the millisecond of `since`, the times' unit: an event
        // written in it after `since` is in. `server_order` moves a time
        // only to another's read here, so none goes before that.
        let mut events = parse_audit(&reply)?;
        for e in &mut events {
            e.prefix = space.prefix().map(str::to_owned);
        }
        Ok(server_order(events))
    }
}

/// One event for the audit trail.
pub(super) struct Event<'a> {
    pub(super) action: &'a str,
    pub(super) key: &'a str,
    pub(super) kind: LockKind,
    pub(super) metadata: &'a str,
    pub(super) fence: u64,
    pub(super) reason: &'a str,
}

/// `XRANGE`'s reply: `[[id, [field, value, ...]], ...]`.
fn parse_audit(reply: &Value) -> Result<Vec<AuditEntry>, Error> {
    let bad = || replies::unexpected("audit", reply);
    let Value::Array(entries) = reply else {
        return Err(bad());
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(parts) = entry else {
            return Err(bad());
        };
        let (Some(id), Some(Value::Array(fields))) = (parts.first().and_then(text), parts.get(1))
        else {
            return Err(bad());
        };
        let ms: u64 = id
            .split('-')
            .next()
            .and_then(|m| m.parse().ok())
            .ok_or_else(bad)?;
        let mut e = AuditEntry {
            time: UNIX_EPOCH + Duration::from_millis(ms),
            prefix: None,
            key: String::new(),
            kind: LockKind::Lock,
            action: String::new(),
            metadata: String::new(),
            fencing_token: 0,
            reason: String::new(),
        };
        for pair in fields.chunks(2) {
            let (Some(field), Some(value)) =
                (pair.first().and_then(text), pair.get(1).and_then(text))
            else {
                continue;
            };
            match field.as_str() {
                "action" => e.action = value,
                "key" => e.key = value,
                "kind" => e.kind = LockKind::parse(&value).unwrap_or(LockKind::Lock),
                "metadata" => e.metadata = value,
                "fence" => e.fencing_token = value.parse().unwrap_or(0),
                "reason" => e.reason = value,
                _ => {}
            }
        }
        out.push(e);
    }
    Ok(out)
}

/// `events` (in the order they were written) with the events of each hold
/// in the order the server made them: by fencing token, a grant before the
/// release or break of its token (one hold's tokens rise with each grant).
/// Each hold's events take the places its events had, and the times of
/// each are made no later than those of the events the server made after
/// it (a release written after the next grant was written happened before
/// it), so that the list, sorted by time (stably), keeps both orders. On
/// one server a time is then still no earlier than its event, and no later
/// than its write.
fn server_order(events: Vec<AuditEntry>) -> Vec<AuditEntry> {
    let mut places: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        places.entry(e.key.clone()).or_default().push(i);
    }
    let mut taken: Vec<Option<AuditEntry>> = events.into_iter().map(Some).collect();
    let mut placed: Vec<Option<AuditEntry>> = (0..taken.len()).map(|_| None).collect();
    for at in places.values() {
        let mut hold: Vec<AuditEntry> = at
            .iter()
            .filter_map(|&i| taken.get_mut(i).and_then(Option::take))
            .collect();
        hold.sort_by_key(|e| (e.fencing_token, e.action != "grant"));
        let mut next = None;
        for e in hold.iter_mut().rev() {
            if let Some(t) = next.filter(|t| *t < e.time) {
                e.time = t;
            }
            next = Some(e.time);
        }
        for (&i, e) in at.iter().zip(hold) {
            if let Some(slot) = placed.get_mut(i) {
                *slot = Some(e);
            }
        }
    }
    let mut out: Vec<AuditEntry> = placed.into_iter().flatten().collect();
    out.sort_by_key(|e| e.time);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(ms: u64, key: &str, action: &str, fence: u64) -> AuditEntry {
        AuditEntry {
            time: UNIX_EPOCH + Duration::from_millis(ms),
            prefix: None,
            key: key.to_owned(),
            kind: LockKind::Lock,
            action: action.to_owned(),
            metadata: String::new(),
            fencing_token: fence,
            reason: String::new(),
        }
    }

    fn seen(events: &[AuditEntry]) -> Vec<(u64, &str, &str, u64)> {
        let ms = |e: &AuditEntry| {
            let d = e.time.duration_since(UNIX_EPOCH).unwrap_or_default();
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
        };
        events
            .iter()
            .map(|e| (ms(e), e.key.as_str(), e.action.as_str(), e.fencing_token))
            .collect()
    }

    #[test]
    fn a_holds_events_are_put_in_the_servers_order_and_times() {
        // Written: b's grant of 2 before a's release of 1 (another locker's
        // thread was quicker), and another key's events in between.
        let written = vec![
            event(10, "k", "grant", 1),
            event(11, "x", "grant", 5),
            event(12, "k", "grant", 2),
            event(13, "k", "release", 1),
            event(14, "x", "break", 5),
            event(15, "k", "release", 2),
        ];
        assert_eq!(
            seen(&server_order(written)),
            [
                (10, "k", "grant", 1),
                (11, "x", "grant", 5),
                // Happened before the grant of 2, written at 12.
                (12, "k", "release", 1),
                (12, "k", "grant", 2),
                (14, "x", "break", 5),
                (15, "k", "release", 2),
            ]
        );
        // A break of a token before the grant of the next (a hand-over).
        let written = vec![
            event(20, "k", "grant", 3),
            event(21, "k", "grant", 4),
            event(22, "k", "break", 3),
        ];
        assert_eq!(
            seen(&server_order(written)),
            [
                (20, "k", "grant", 3),
                (21, "k", "break", 3),
                (21, "k", "grant", 4),
            ]
        );
        assert!(server_order(Vec::new()).is_empty());
    }
}
