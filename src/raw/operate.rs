//! What an operator does, as said to Redis: the holds of a prefix found by a
//! `SCAN` walk of every instance (every master of a Cluster) and each read
//! with its waiters; a hold broken (`lua/break.lua`) and this locker's
//! waiters woken as after a release, its event written to the audit trail
//! (`audit.rs`); why a holder's keys are gone.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use redis::Value;

use crate::defaults::{BREAK_MARK_MARGIN, MAX_LISTED_WAITERS, SCAN_COUNT};
use crate::info::LockInfo;
use crate::protocol::named::Named;
use crate::protocol::replies;
use crate::protocol::scripts;
use crate::protocol::slots;
use crate::quorum::{self, Acquired};
use crate::time;
use crate::Error;

use super::audit::Event;
use super::{Acquisition, RawLock};

impl RawLock {
    /// Every hold of this prefix whose listed name `keep` accepts, found by
    /// a `SCAN` walk (string keys only, [`SCAN_COUNT`] a step) of each
    /// instance, and of each master of a Cluster; sorted by name. With
    /// several instances (Redlock), one that cannot be walked is skipped
    /// while a majority can be.
    pub(crate) fn scan_holds(&self, keep: &dyn Fn(&str) -> bool) -> Result<Vec<Named>, Error> {
        let cluster = self.config.topology.is_cluster();
        let pattern = self.config.keys.scan_pattern();
        let mut found = BTreeMap::new();
        let (mut walked, mut last) = (0, None);
        for i in 0..self.instances.len() {
            let walk = self.routes(i, cluster).and_then(|routes| {
                for route in routes {
                    self.walk(i, &route, &pattern, &mut |key| {
                        if let Some(hold) = self.config.keys.named(key, cluster) {
                            let name = hold.caller_key();
                            if keep(&name) {
                                found.insert(name, hold);
                            }
                        }
                    })?;
                }
                Ok(())
            });
            match walk {
                Ok(()) => walked += 1,
                Err(e) => last = Some(e),
            }
        }
        if walked < quorum::quorum(self.instances.len()) {
            return Err(self.quorum_error(walked, last));
        }
        Ok(found.into_values().collect())
    }

    /// One key per server to walk on instance `i`, routing the scan there:
    /// on a Cluster, a key in the first slot of each master (`CLUSTER
    /// SLOTS`); else any key.
    fn routes(&self, i: usize, cluster: bool) -> Result<Vec<String>, Error> {
        if !cluster {
            return Ok(vec![self.config.keys.fence_key()]);
        }
        let reply = self.run_on(i, &mut |c| {
            Ok(redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(c)?)
        })?;
        let Value::Array(ranges) = &reply else {
            return Err(replies::unexpected("cluster slots", &reply));
        };
        let mut masters: BTreeMap<String, u16> = BTreeMap::new();
        for range in ranges {
            let Value::Array(parts) = range else {
                return Err(replies::unexpected("cluster slots", &reply));
            };
            let (Some(Value::Int(start)), Some(Value::Array(master))) =
                (parts.first(), parts.get(2))
            else {
                return Err(replies::unexpected("cluster slots", &reply));
            };
            let address = format!("{:?}", master.iter().take(2).collect::<Vec<_>>());
            let slot = u16::try_from(*start).unwrap_or(0);
            masters.entry(address).or_insert(slot);
        }
        Ok(masters
            .into_values()
            .map(|slot| format!("{{{}}}", slots::tag_for(slot)))
            .collect())
    }

    /// A whole `SCAN` walk of the server of `route` on instance `i`,
    /// calling `each` with every key found.
    fn walk(
        &self,
        i: usize,
        route: &str,
        pattern: &str,
        each: &mut dyn FnMut(&str),
    ) -> Result<(), Error> {
        let mut cursor = 0;
        loop {
            // Outside a Cluster the step itself keeps only the holds.
            let holds = !self.config.topology.is_cluster();
            let call = scripts::scan(route, cursor, pattern, SCAN_COUNT, holds);
            let reply = self.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            let (next, keys) = replies::parse_scan(&reply)?;
            for key in &keys {
                each(key);
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// The hold `hold` with its live waiters, as a majority of instances
    /// sees it; `None` when free. A key redmutex did not write has token 0
    /// (see `replies::held`), for the caller to refuse ([`foreign`]) or skip.
    pub(crate) fn read_hold(self: &Arc<Self>, hold: &Named) -> Result<Option<LockInfo>, Error> {
        let keys = self
            .config
            .keys
            .hold_keys(hold, self.config.topology.is_cluster());
        let (this, hold) = (Arc::clone(self), hold.clone());
        let answers = self.fan.run(self.instances.len(), move |i| {
            let call = scripts::inspect(&keys, MAX_LISTED_WAITERS);
            let reply = this.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            replies::parse_inspect(&reply, &hold)
        });
        match quorum::decide_holder(answers) {
            Ok(info) => Ok(info),
            Err(Acquired::NoQuorum { granted, last }) => Err(self.quorum_error(granted, last)),
            Err(_) => Ok(None),
        }
    }

    /// Breaks the hold `hold` for `reason` on every instance (see
    /// `lua/break.lua`), wakes this locker's waiters as a release does, and
    /// writes the break to the audit trail. The hold as it was, as a
    /// majority saw it; `None` when it was free.
    pub(crate) fn break_hold(
        self: &Arc<Self>,
        hold: &Named,
        reason: &str,
    ) -> Result<Option<LockInfo>, Error> {
        let keys = self
            .config
            .keys
            .hold_keys(hold, self.config.topology.is_cluster());
        let watched = Arc::clone(keys.watched());
        let keep = time::millis_ceil(BREAK_MARK_MARGIN);
        // Announced where a release of the hold is (on a Cluster, its
        // slot's shard channel), so it is handed over as a release would.
        let channel = self.channel_for(&keys).map(Cow::into_owned);
        let (this, hold2, reason2) = (Arc::clone(self), hold.clone(), reason.to_owned());
        let answers = self.fan.run(self.instances.len(), move |i| {
            let channel = channel.as_deref().unwrap_or("");
            let call = scripts::break_hold(&keys, &reason2, channel, keep, MAX_LISTED_WAITERS);
            let reply = this.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            replies::parse_break(&reply, &hold2)
        });
        let (mut foreign_key, mut handed) = (false, None);
        let answers = answers
            .into_iter()
            .map(|a| {
                a.map(|broken| {
                    broken.and_then(|(info, ours, to)| {
                        foreign_key |= !ours;
                        handed = handed.take().or(to);
                        ours.then_some(info)
                    })
                })
            })
            .collect();
        match &handed {
            Some((token, fence)) => self.wake.waiters().hand_over(token, *fence),
            None => {
                for k in watched.iter() {
                    self.wake.waiters().notify(k);
                }
            }
        }
        let info = match quorum::decide_holder(answers) {
            Ok(info) => info,
            Err(Acquired::NoQuorum { granted, last }) => {
                return Err(self.quorum_error(granted, last))
            }
            Err(_) => None,
        };
        if let Some(info) = &info {
            log::warn!(
                target: "redmutex::break",
                "{} {:?} of {:?} (fencing token {}) broken by an operator: {reason}",
                info.kind.as_str(),
                info.key,
                info.metadata,
                info.fencing_token
            );
            let event = Event {
                action: "break",
                key: &info.key,
                kind: info.kind,
                metadata: &info.metadata,
                fence: info.fencing_token,
                reason,
            };
            // Written before the break returns (an operator's command may
            // exit at once), within the checkout and I/O timeouts.
            let number = self.audit(&event);
            let bound = self
                .config
                .checkout_timeout
                .saturating_add(self.config.io_timeout);
            self.flush_trail(number, bound);
        } else if foreign_key {
            return Err(foreign(hold));
        }
        Ok(info)
    }

    /// Why `a`'s keys are no longer its own when an operator broke its hold:
    /// the reason the break left in the marks of its slot (see
    /// `lua/lib/marks.lua`), read on every instance (one round trip each,
    /// in parallel); `None` when no mark names its token, or none could be
    /// read. For a holder's call that found its keys gone (a guarded
    /// write, a release), which says no more than that.
    pub(crate) fn why_lost(self: &Arc<Self>, a: &Acquisition) -> Option<String> {
        let (marks, owner) = (a.keys.marks.clone(), a.owner());
        let this = Arc::clone(self);
        let answers = self.fan.run(self.instances.len(), move |i| {
            let reply = this.run_on(i, &mut |c| {
                Ok(redis::cmd("HGET")
                    .arg(&marks)
                    .arg(owner.as_str())
                    .query::<Value>(c)?)
            })?;
            Ok(replies::parse_mark(&reply))
        });
        answers.into_iter().find_map(|a| a.ok().flatten())
    }
}

/// The error for the hold `hold` when its key is one redmutex did not
/// write (an application's value, or one without an expiry): no hold.
pub(crate) fn foreign(hold: &Named) -> Error {
    Error::InvalidInput(format!(
        "{:?} is a key redmutex did not write (another value, or one without an expiry): \
         no hold, left as it is",
        hold.caller_key()
    ))
}
