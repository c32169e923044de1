//! An election's mechanism: its keys, a candidate's acquisition (a lock
//! whose metadata is the candidate's value), the leader logged before it
//! is told it leads, its value proclaimed, and an observer's reads of the
//! log of changes.
//!
//! The leader holds the election key as a lock (its fencing token is the
//! term); every change is appended to a capped stream beside it by the
//! script that makes it: `announce.lua` for a new leader (with a "no
//! leader" before it when the previous one left without resigning, or a
//! candidate handed the lead never took it up),
//! `proclaim.lua` for a new value, `resign.lua` for a resignation (what
//! follows it: the candidate handed the lead, or no leader). `prefer.lua`
//! moves a chosen candidate to the head of the queue before a resignation
//! (`Leadership::hand_over_to`); it logs nothing. A lease that
//! runs out has no script: observers see it by reading the key when its
//! TTL is up, and the next leader's announcement logs it.

use std::time::Duration;

use redis::{ConnectionLike, Value};

use crate::protocol::keys::{self, Hold, LockKeys};
use crate::protocol::replies::{self, Observed};
use crate::protocol::scripts;
use crate::time;
use crate::Error;

use super::{acknowledged, Acquisition, RawLock};

/// The longest value a candidate may campaign with or proclaim.
pub(crate) const MAX_VALUE: usize = 64 * 1024;

impl RawLock {
    /// Refuses what an election cannot do: Redlock (its log is kept on one
    /// server), a name that is no valid key.
    pub(crate) fn check_election(&self, name: &str) -> Result<(), Error> {
        keys::validate_key(name)?;
        if self.config.topology.is_redlock() {
            return Err(Error::Unsupported {
                reason: "an election needs one server (or Sentinel, or a Cluster): \
                         its log of changes cannot be kept by a Redlock quorum"
                    .to_owned(),
            });
        }
        Ok(())
    }

    /// The Redis keys of the election `name` (checked already).
    pub(crate) fn election_keys(&self, name: &str) -> LockKeys {
        let cluster = self.config.topology.is_cluster();
        self.config.keys.election_keys(name, cluster)
    }

    /// A candidate's acquisition of the election `name` (checked already)
    /// with `value` as its keys' metadata.
    pub(crate) fn prepare_candidate(&self, name: &str, value: &str) -> Result<Acquisition, Error> {
        check_value(value)?;
        let mut a = Acquisition::new(
            std::sync::Arc::from([name.to_owned()]),
            self.election_keys(name),
        )?;
        a.metadata = Some(value.to_owned());
        Ok(a)
    }

    /// Logs the leader `a` was granted as (see `lua/announce.lua`): true
    /// when the key is still ours, false when it was lost meanwhile.
    /// With `min_replicas`, the entry is acknowledged as the grant was
    /// (else [`Error::NotReplicated`]; it stands on the master).
    pub(crate) fn announce(&self, a: &Acquisition) -> Result<bool, Error> {
        let ttl = time::millis_ceil(self.config.ttl);
        let call = scripts::announce(&a.keys, a.owner().as_str(), ttl);
        self.acknowledged_script(&call, "announce")
    }

    /// Sets the value of the leader `a` (see `lua/proclaim.lua`): true when
    /// the key was still ours, false when not (nothing changed).
    /// With `min_replicas`, acknowledged as a grant is (else
    /// [`Error::NotReplicated`]; the value stands on the master).
    pub(crate) fn proclaim(&self, a: &Acquisition, value: &str) -> Result<bool, Error> {
        check_value(value)?;
        let call = scripts::proclaim(&a.keys, a.owner().as_str(), value);
        let set = self.acknowledged_script(&call, "proclaim");
        // The key carries it (on the master, if not replicated).
        if matches!(set, Ok(true) | Err(Error::NotReplicated { .. })) {
            *a.proclaimed.lock() = Some(value.to_owned());
        }
        set
    }

    /// Puts the first live candidate queued with `value` at the head of
    /// the queue of the election `a` leads (see `lua/prefer.lua`), so that
    /// its resignation hands the lead to it: `Some(found)` when the key is
    /// still `a`'s, `None` when not (nothing changed).
    pub(crate) fn prefer(&self, a: &Acquisition, value: &str) -> Result<Option<bool>, Error> {
        check_value(value)?;
        let call = scripts::prefer(&a.keys, a.owner().as_str(), value);
        let reply = self.run_on(0, &mut |c| Ok(call.invoke::<Value>(c)?))?;
        Ok(match replies::int_reply(&reply, "prefer")? {
            -1 => None,
            n => Some(n == 1),
        })
    }

    /// Runs the owner-checked `call` (replying 1 when the key was ours, 0
    /// when not) and, when it changed something, waits for `min_replicas`
    /// acknowledgements on the same connection: a failover then keeps the
    /// change as it keeps the lead.
    fn acknowledged_script(&self, call: &scripts::Call, what: &str) -> Result<bool, Error> {
        let mut ours = false;
        self.run_on(0, &mut |c| {
            let reply = call.invoke::<Value>(c)?;
            ours = replies::int_reply(&reply, what)? == 1;
            if ours {
                acknowledged(&self.config, c)?;
            }
            Ok(reply)
        })?;
        Ok(ours)
    }

    /// The log's entries after `after` (`None`: none, a first look) and
    /// the leader now, read at once.
    pub(crate) fn observe(&self, keys: &LockKeys, after: Option<&str>) -> Result<Observed, Error> {
        let call = scripts::observe(keys, after);
        let reply = self.run_on(0, &mut |c| Ok(call.invoke::<Value>(c)?))?;
        replies::parse_observe(&reply)
    }

    /// Blocks until the log of `keys` has an entry after `after`, or for
    /// `block` (`XREAD BLOCK`, on a pooled connection whose read timeout
    /// is stretched by `block` for this call).
    pub(crate) fn wait_log(
        &self,
        keys: &LockKeys,
        after: &str,
        block: Duration,
    ) -> Result<(), Error> {
        let Hold::Leader { log } = &keys.hold else {
            return Ok(());
        };
        let (checkout, io) = (self.config.checkout_timeout, self.config.io_timeout);
        let ms = time::millis_ceil(block).max(1);
        let mut op = |c: &mut dyn ConnectionLike| {
            Ok(redis::cmd("XREAD")
                .arg("COUNT")
                .arg(1)
                .arg("BLOCK")
                .arg(ms)
                .arg("STREAMS")
                .arg(log)
                .arg(after)
                .query::<Value>(c)?)
        };
        self.instance(0)?
            .run(checkout, io.saturating_add(block), &mut op, None)?;
        Ok(())
    }
}

/// A value no longer than [`MAX_VALUE`].
fn check_value(value: &str) -> Result<(), Error> {
    if value.len() > MAX_VALUE {
        return Err(Error::InvalidInput(format!(
            "an election value may be at most {MAX_VALUE} bytes, not {}",
            value.len()
        )));
    }
    Ok(())
}
