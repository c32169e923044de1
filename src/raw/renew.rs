//! The renewal of a granted hold, whatever its primitive, and the expiry
//! set at its end when it must last until a given time.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::lease::watchdog::Renewal;
use crate::lease::Lease;
use crate::protocol::replies;
use crate::protocol::scripts;
use crate::protocol::value::LockValue;
use crate::quorum::{self, RenewDecision};
use crate::stats::recorder::Loss;
use crate::time;
use crate::Error;

use super::{acknowledged, Acquisition, RawLock};

impl RawLock {
    /// One owner-checked renewal of `lease` on every instance, for `ttl`
    /// (`None`: the lease's own TTL, read inside the serialized section, so
    /// that a renewal never undoes an `extend` that confirmed before it),
    /// recorded in the lease. Serialized per lease, so concurrent `extend`
    /// and watchdog calls confirm in the order Redis applied them, and never
    /// started once the guard has stopped the lease.
    ///
    /// With several instances (Redlock), a key of ours found missing on an
    /// instance (its data lost) is put back with our value and the TTL, and
    /// that instance counts as confirmed only then: a majority that erodes
    /// one instance at a time is repaired, not silently lost.
    pub(crate) fn renew(
        self: &Arc<Self>,
        lease: &Lease,
        a: &Arc<Acquisition>,
        fence: u64,
        ttl: Option<Duration>,
    ) -> Result<Renewal, Error> {
        let renewal = lease
            .serialized(|| {
                let ttl = ttl.unwrap_or_else(|| lease.schedule().0);
                let renewal = self.renew_now(lease, a, fence, ttl);
                if renewal.is_err() {
                    lease.note_failed();
                }
                renewal
            })
            .unwrap_or(Ok(Renewal::Stopped));
        match renewal {
            Ok(Renewal::Lost) => self.count_loss(a, lease),
            Err(_) => self.stats.renewal_failed(&**a),
            Ok(_) => {}
        }
        renewal
    }

    /// Counts the loss of `a`'s lease in the stats, once per guard: as
    /// expired when its deadline has passed, else as not ours (Redis
    /// showed the key gone or someone else's).
    pub(crate) fn count_loss(&self, a: &Acquisition, lease: &Lease) {
        self.count_loss_as(a, lease, false);
    }

    /// Redis showed `a`'s keys no longer its own: its lease is lost for
    /// good, counted (once) and marked, as broken by an operator saying
    /// `why` when one did (see `lib/marks.lua`), else as not ours. Counted
    /// before anyone waiting for the loss is woken.
    pub(crate) fn lost_for(&self, a: &Acquisition, lease: &Lease, why: Option<String>) {
        self.count_loss_as(a, lease, why.is_some());
        match why {
            Some(reason) => lease.mark_broken(&reason),
            None => lease.mark_lost(),
        }
    }

    /// Counts the loss of `a`'s lease once, as broken by an operator when
    /// `broken` (else by its deadline or Redis's answer).
    pub(crate) fn count_loss_as(&self, a: &Acquisition, lease: &Lease, broken: bool) {
        if !a.loss_counted.swap(true, Ordering::Relaxed) {
            let why = if broken {
                Loss::Broken
            } else if lease.valid_until() <= Instant::now() {
                Loss::Expired
            } else {
                Loss::NotOurs
            };
            self.stats.lost(a, why);
        }
    }

    fn renew_now(
        self: &Arc<Self>,
        lease: &Lease,
        a: &Arc<Acquisition>,
        fence: u64,
        ttl: Duration,
    ) -> Result<Renewal, Error> {
        if lease.is_lost() {
            return Ok(Renewal::Lost);
        }
        let owner = a.owner();
        let repair = self.config.topology.is_redlock().then(|| {
            let value = LockValue {
                token: owner.as_str(),
                fence,
                metadata: &self.config.metadata,
            };
            (value.format(), fence)
        });
        if self.instances.len() > 1 {
            a.note_ttl(ttl);
        }
        let sent = Instant::now();
        let noted = Arc::clone(a);
        let (this, a) = (Arc::clone(self), Arc::clone(a));
        let answers = self.fan.run(self.instances.len(), move |i| {
            let repair = repair
                .as_ref()
                .map(|(value, fence)| (value.as_str(), *fence));
            let delay = time::millis_ceil(this.lock_delay(&a.keys));
            let ttl = time::millis_ceil(ttl);
            let call = scripts::renew(&a.keys, owner.as_str(), ttl, repair, delay);
            let reply = this.run_renewal_on(i, &mut |c| {
                let reply = call.invoke::<Value>(c)?;
                // A renewal counts once the replicas have it too: else a
                // failover to one of them could find the lock expired.
                if reply == Value::Int(1) {
                    acknowledged(&this.config, c)?;
                }
                Ok(reply)
            })?;
            replies::parse_renew(&reply)
        });
        let (answers, broken) = with_why(answers);
        if self.instances.len() > 1 {
            noted.note_stalled(&answers);
        }
        match quorum::decide_renew(answers) {
            RenewDecision::Confirmed { rival } if lease.confirm(sent, ttl) => {
                // A rival's attempt holds the key on an instance for a
                // moment: come back soon to take it, rather than a third of
                // the TTL later, so that a bare majority does not last.
                if rival {
                    lease.hurry();
                } else {
                    lease.unhurry();
                }
                Ok(Renewal::Confirmed)
            }
            RenewDecision::Confirmed { .. } | RenewDecision::Lost => {
                self.lost_for(&noted, lease, broken);
                Ok(Renewal::Lost)
            }
            RenewDecision::Failed { confirmed, last } => Err(self.quorum_error(confirmed, last)),
        }
    }

    /// Sets the keys of `a` to expire `ttl` from now, where they are still
    /// ours, and leaves them (no delete, no announcement, no hand-over):
    /// the end of a hold that must last until a given time. `Ok(Ok(()))`: a
    /// majority still had them; `Ok(Err(why))`: the lease had been lost,
    /// broken by an operator saying `why` if one did. The guard's watchdog
    /// must be stopped first.
    pub(crate) fn expire(
        self: &Arc<Self>,
        a: &Arc<Acquisition>,
        ttl: Duration,
    ) -> Result<Result<(), Option<String>>, Error> {
        let owner = a.owner();
        let (this, a) = (Arc::clone(self), Arc::clone(a));
        let answers = self.fan.run(self.instances.len(), move |i| {
            let delay = time::millis_ceil(this.lock_delay(&a.keys));
            let ttl = time::millis_ceil(ttl);
            let call = scripts::renew(&a.keys, owner.as_str(), ttl, None, delay);
            let reply = this.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            replies::parse_renew(&reply)
        });
        let (answers, broken) = with_why(answers);
        match quorum::decide_renew(answers) {
            RenewDecision::Confirmed { .. } => Ok(Ok(())),
            RenewDecision::Lost => Ok(Err(broken)),
            RenewDecision::Failed { confirmed, last } => Err(self.quorum_error(confirmed, last)),
        }
    }
}

/// The instances' renewal answers, each whether it renewed, and the
/// reason of an operator's break that any of them said: why the lease is
/// lost, if it is.
fn with_why(
    answers: Vec<Result<(bool, Option<String>), Error>>,
) -> (Vec<Result<bool, Error>>, Option<String>) {
    let mut broken = None;
    let answers = answers
        .into_iter()
        .map(|a| {
            a.map(|(renewed, why)| {
                broken = broken.take().or(why);
                renewed
            })
        })
        .collect();
    (answers, broken)
}
