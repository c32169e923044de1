//! A semaphore's mechanism: its permit keys, how many are free, and the
//! permit an acquisition was granted.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use redis::Value;

use crate::protocol::keys::{Hold, LockKeys};
use crate::protocol::replies;
use crate::Error;

use super::{Acquisition, RawLock, NO_SLOT};

impl Acquisition {
    /// Which permit of a semaphore this acquisition holds, once granted;
    /// `None` for a lock.
    pub(crate) fn permit_index(&self) -> Option<u32> {
        let slot = self.slot.load(Ordering::SeqCst);
        (slot != NO_SLOT)
            .then(|| u32::try_from(slot).ok())
            .flatten()
    }

    /// The acquisition of the permit that was granted, for its guard:
    /// its one lock key, with the semaphore's queue (a release hands that
    /// permit to the next waiter). A lock's acquisition is returned as it is.
    pub(crate) fn granted_permit(self: Arc<Self>) -> Result<Arc<Acquisition>, Error> {
        if !self.is_permit() {
            return Ok(self);
        }
        let slot = self.slot.load(Ordering::SeqCst);
        let key = self
            .keys
            .locks
            .get(slot)
            .cloned()
            .ok_or_else(|| replies::unexpected("permit", &Value::Int(0)))?;
        let mut keys = self.keys.clone();
        keys.locks = Arc::from([key]);
        keys.hold = Hold::Lock;
        Ok(Arc::new(Acquisition {
            token: self.token.clone(),
            owner: Mutex::new(self.owner()),
            caller_keys: Arc::clone(&self.caller_keys),
            keys,
            metadata: self.metadata.clone(),
            proclaimed: Mutex::new(None),
            floor: AtomicU64::new(self.floor.load(Ordering::SeqCst)),
            slot: AtomicUsize::new(slot),
            stalled: AtomicU64::new(self.stalled.load(Ordering::SeqCst)),
            longest_ttl: AtomicU64::new(self.longest_ttl.load(Ordering::SeqCst)),
            loss_counted: AtomicBool::new(false),
        }))
    }

    /// A semaphore's permit, not granted yet.
    pub(super) fn is_permit(&self) -> bool {
        matches!(self.keys.hold, Hold::Permit)
    }
}

impl RawLock {
    /// The Redis keys of the semaphore `name` of `permits` permits.
    fn permit_keys(&self, name: &str, permits: u32) -> LockKeys {
        let cluster = self.config.topology.is_cluster();
        self.config.keys.permit_keys(name, permits, cluster)
    }

    /// Prepares the acquisition of one permit of the semaphore `name` of
    /// `permits` permits (both checked already).
    pub(crate) fn prepare_permit(&self, name: &str, permits: u32) -> Result<Acquisition, Error> {
        let keys = self.permit_keys(name, permits);
        Acquisition::new(Arc::from([name.to_owned()]), keys)
    }

    /// How many permits of the semaphore `name` of `permits` permits are
    /// free now.
    pub(crate) fn free_permits(&self, name: &str, permits: u32) -> Result<u32, Error> {
        let keys = self.permit_keys(name, permits);
        let reply = self.run_on(0, &mut |c| {
            Ok(redis::cmd("EXISTS").arg(&*keys.locks).query::<Value>(c)?)
        })?;
        let taken = u32::try_from(replies::int_reply(&reply, "exists")?).unwrap_or(u32::MAX);
        let all = u32::try_from(keys.locks.len()).unwrap_or(u32::MAX);
        Ok(all.saturating_sub(taken))
    }
}
