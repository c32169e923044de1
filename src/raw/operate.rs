//! What an operator does, as said to Redis: the holds of a prefix (and of
//! those nested in it) found by a `SCAN` walk of every instance (every
//! master of a Cluster) and each read with its waiters under its own
//! prefix; a hold broken under its own prefix (`lua/break.lua`) and this
//! locker's waiters woken as after a release, its event written to that
//! prefix's audit trail (`audit.rs`); the audit trails of a walk; why a
//! holder's keys are gone.

use std::collections::BTreeMap;
use std::sync::Arc;

use redis::Value;

use crate::defaults::{BREAK_MARK_MARGIN, MAX_LISTED_WAITERS, SCAN_COUNT};
use crate::info::LockInfo;
use crate::protocol::keys::{KeySpace, LockKeys, RESERVED};
use crate::protocol::named::Target;
use crate::protocol::replies::{self, Broke};
use crate::protocol::scripts;
use crate::protocol::slots;
use crate::quorum::{self, Acquired};
use crate::time;
use crate::Error;

use super::audit::Event;
use super::{Acquisition, RawLock};

impl RawLock {
    /// Every hold of this prefix, and of the prefixes nested in it, whose
    /// listed name `keep` accepts, found by a `SCAN` walk (string keys
    /// only, [`SCAN_COUNT`] a step) of each instance, and of each master of
    /// a Cluster; sorted by name. With several instances (Redlock), one
    /// that cannot be walked is skipped while a majority can be.
    pub(crate) fn scan_holds(&self, keep: &dyn Fn(&str) -> bool) -> Result<Vec<Target>, Error> {
        let cluster = self.config.topology.is_cluster();
        let pattern = self.config.keys.scan_pattern();
        let mut found = BTreeMap::new();
        let (mut walked, mut last) = (0, None);
        for i in 0..self.instances.len() {
            let walk = self.walk_all(i, &pattern, "string", &mut |key| {
                if let Some(hold) = self.config.keys.found(key, cluster) {
                    if keep(&hold.caller) {
                        found.insert(hold.caller.clone(), hold);
                    }
                }
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

    /// The prefixes with an audit trail (none: `None`), this one's and
    /// those nested in it, found by a `SCAN` walk of the first instance,
    /// where the trails are (of each of its masters on a Cluster), sorted.
    pub(crate) fn trails(&self) -> Result<Vec<KeySpace>, Error> {
        let pattern = format!("{}{RESERVED}:audit", self.config.keys.scan_pattern());
        let mut found = BTreeMap::new();
        self.walk_all(0, &pattern, "stream", &mut |key| {
            let own = match key.strip_suffix(&format!("{RESERVED}:audit")) {
                Some("") => None,
                Some(before) => match before.strip_suffix(':') {
                    Some(p) if !p.is_empty() && !p.contains(RESERVED) => Some(p.to_owned()),
                    _ => return,
                },
                None => return,
            };
            found.insert(key.to_owned(), KeySpace::new(own));
        })?;
        Ok(found.into_values().collect())
    }

    /// A whole walk of instance `i` (of each of its masters on a Cluster)
    /// for the keys of type `kind` that match `pattern`, calling `each`
    /// with every key found.
    fn walk_all(
        &self,
        i: usize,
        pattern: &str,
        kind: &str,
        each: &mut dyn FnMut(&str),
    ) -> Result<(), Error> {
        let cluster = self.config.topology.is_cluster();
        for route in self.routes(i, cluster)? {
            self.walk(i, &route, pattern, kind, each)?;
        }
        Ok(())
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

    /// A whole `SCAN` walk of the server of `route` on instance `i` for
    /// the keys of type `kind`, calling `each` with every key found.
    fn walk(
        &self,
        i: usize,
        route: &str,
        pattern: &str,
        kind: &str,
        each: &mut dyn FnMut(&str),
    ) -> Result<(), Error> {
        let mut cursor = 0;
        loop {
            // Outside a Cluster the step itself keeps only the holds.
            let holds = !self.config.topology.is_cluster() && kind == "string";
            let call = scripts::scan(route, cursor, pattern, SCAN_COUNT, holds, kind);
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

    /// The hold `target` with its live waiters, under its own prefix, as
    /// a majority of instances sees it; `None` when free. A key redmutex
    /// did not write has token 0 (see `replies::held`), for the caller to
    /// refuse ([`foreign`]) or skip.
    pub(crate) fn read_hold(self: &Arc<Self>, target: &Target) -> Result<Option<LockInfo>, Error> {
        let cluster = self.config.topology.is_cluster();
        let inspect = |t: &Target| scripts::inspect(&t.keys(cluster), t.scope, MAX_LISTED_WAITERS);
        let call = inspect(target);
        let within = target.within().map(|t| inspect(&t));
        let (this, target) = (Arc::clone(self), target.clone());
        let answers = self.fan.run(self.instances.len(), move |i| {
            let reply = this.run_on(i, &mut |c| Ok(or_within(c, &call, within.as_ref())?))?;
            replies::parse_inspect(&reply, &target)
        });
        match quorum::decide_holder(answers) {
            Ok(info) => Ok(info),
            Err(Acquired::NoQuorum { granted, last }) => Err(self.quorum_error(granted, last)),
            Err(_) => Ok(None),
        }
    }

    /// The channel a release of `keys` (of the prefix `space`) is
    /// announced on: that prefix's release channel, or on a cluster the
    /// shard channel of the keys' slot; `""` when releases are not.
    fn channel_under(&self, space: &KeySpace, keys: &LockKeys) -> String {
        match self.shard_of(keys) {
            Some(slot) => space.shard_release_channel(slot),
            None if self.wake.channel().is_some() => space.release_channel(),
            None => String::new(),
        }
    }

    /// Breaks the hold `target` for `reason` under its own prefix on every
    /// instance (see `lua/break.lua`), wakes this locker's waiters as a
    /// release does, and writes the break to that prefix's audit trail.
    /// The hold as it was, as a majority saw it; `None` when it was free.
    pub(crate) fn break_hold(
        self: &Arc<Self>,
        target: &Target,
        reason: &str,
    ) -> Result<Option<LockInfo>, Error> {
        let keys = target.keys(self.config.topology.is_cluster());
        let watched = keys
            .first()
            .map(|k| Arc::clone(k.watched()))
            .unwrap_or_default();
        let keep = time::millis_ceil(BREAK_MARK_MARGIN);
        // Announced where a release of the hold is (on a Cluster, its
        // slot's shard channel), so it is handed over as a release would.
        let under: Vec<(LockKeys, String)> = target
            .under
            .iter()
            .zip(keys)
            .map(|((space, _), keys)| {
                let channel = self.channel_under(space, &keys);
                (keys, channel)
            })
            .collect();
        let (known, scope) = (target.known, target.scope);
        let call = scripts::break_hold(&under, known, scope, reason, keep, MAX_LISTED_WAITERS);
        let within = target.within().map(|t| {
            let under = under.get(..t.scope).unwrap_or_default();
            scripts::break_hold(under, known, scope, reason, keep, MAX_LISTED_WAITERS)
        });
        let (this, target2) = (Arc::clone(self), target.clone());
        let answers = self.fan.run(self.instances.len(), move |i| {
            let reply = this.run_on(i, &mut |c| Ok(or_within(c, &call, within.as_ref())?))?;
            replies::parse_break(&reply, &target2)
        });
        let (mut foreign_key, mut untold, mut elsewhere, mut handed) = (false, false, None, None);
        let answers = answers
            .into_iter()
            .map(|a| {
                a.map(|broke| match broke {
                    Broke::Free => None,
                    Broke::Foreign => {
                        foreign_key = true;
                        None
                    }
                    Broke::Untold => {
                        untold = true;
                        None
                    }
                    Broke::Outside(info) => {
                        elsewhere = Some(info);
                        None
                    }
                    Broke::Broken(info, to) => {
                        handed = handed.take().or(to);
                        Some(*info)
                    }
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
        let Some(info) = info else {
            if let Some(held) = elsewhere {
                return Err(outside(target, &held));
            }
            if untold {
                return Err(untold_prefix(target));
            }
            if foreign_key {
                return Err(foreign(&target.caller));
            }
            return Ok(None);
        };
        let under = info
            .prefix
            .as_deref()
            .map(|p| format!(" of prefix {p:?}"))
            .unwrap_or_default();
        log::warn!(
            target: "redmutex::break",
            "{} {:?}{under} of {:?} (fencing token {}) broken by an operator: {reason}",
            info.kind.as_str(),
            info.own_key,
            info.metadata,
            info.fencing_token
        );
        let event = Event {
            action: "break",
            key: &info.own_key,
            kind: info.kind,
            metadata: &info.metadata,
            fence: info.fencing_token,
            reason,
        };
        // Written to its own prefix's trail before the break returns (an
        // operator's command may exit at once), within the checkout and
        // I/O timeouts.
        let trail = KeySpace::new(info.prefix.clone()).audit_key();
        let number = self.audit_to(&trail, &event);
        let bound = self
            .config
            .checkout_timeout
            .saturating_add(self.config.io_timeout);
        self.flush_trail(number, bound);
        Ok(Some(info))
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

/// The error for the hold named `name` when its key is one redmutex did
/// not write (an application's value, or one without an expiry): no hold.
pub(crate) fn foreign(name: &str) -> Error {
    Error::InvalidInput(format!(
        "{name:?} is a key redmutex did not write (another value, or one without an expiry): \
         no hold, left as it is"
    ))
}

/// `full`'s reply on `c`, or `within`'s when the server refuses `full`
/// for the keys it names (`NOPERM`, before the script runs: nothing was
/// done): an ACL that keeps this user to its prefix's keys denies it the
/// outer prefixes' (see `Target::within`).
fn or_within(
    c: &mut dyn redis::ConnectionLike,
    full: &scripts::Call,
    within: Option<&scripts::Call>,
) -> redis::RedisResult<Value> {
    match (full.invoke::<Value>(c), within) {
        (Err(e), Some(within)) if e.code() == Some("NOPERM") => within.invoke(c),
        (reply, _) => reply,
    }
}

/// The error for a break of `target` whose hold is `held`, of a prefix
/// outside this locker's (an outer one, or none): left as it is, for a
/// locker of that prefix to break.
fn outside(target: &Target, held: &LockInfo) -> Error {
    let under = match &held.prefix {
        Some(p) => format!("of prefix {p:?}"),
        None => "of no prefix".to_owned(),
    };
    let asked = target
        .under
        .get(target.scope.saturating_sub(1))
        .and_then(|(space, _)| space.prefix())
        .map_or_else(|| "no prefix".to_owned(), |p| format!("prefix {p:?}"));
    Error::InvalidInput(format!(
        "{:?} is {} {:?} {under}, outside {asked} (and those nested in it): left as it \
         is; break it with a locker of its prefix, or without a prefix by its whole key",
        target.caller,
        held.kind.as_str(),
        held.own_key
    ))
}

/// The error for a break of `target` when none of the prefixes its key may
/// be under has granted its fencing token: nothing tells which prefix's
/// holder it is, so it is left as it is.
fn untold_prefix(target: &Target) -> Error {
    Error::InvalidInput(format!(
        "{:?} is a lock key that none of the prefixes it may be under ({}) has granted \
         (its fencing counter is gone, or redmutex did not write it): nothing tells which \
         holder to tell, so it is left as it is; it frees itself when its TTL runs out",
        target.caller,
        target.prefixes()
    ))
}
