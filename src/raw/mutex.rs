//! A lock's own mechanism: its keys checked and named, and who holds one.

use std::sync::Arc;

use crate::info::LockInfo;
use crate::protocol::keys;
use crate::Error;

use super::operate::foreign;
use super::{Acquisition, RawLock};

impl RawLock {
    /// Checks the keys and prepares an acquisition (a fresh token).
    pub(crate) fn prepare(&self, keys: &[&str]) -> Result<Acquisition, Error> {
        keys::validate_keys(keys)?;
        let cluster = self.config.topology.is_cluster();
        let lock_keys = self.config.keys.lock_keys(keys, cluster);
        if cluster {
            keys::same_slot(keys, &lock_keys.locks)?;
        }
        let caller_keys = keys.iter().map(|k| (*k).to_owned()).collect();
        Acquisition::new(caller_keys, lock_keys)
    }

    /// Who holds `key` (a lock's key, or any name a listing gives a hold),
    /// with its live waiters under its own prefix, as a majority of
    /// instances sees it; [`Error::InvalidInput`] for a key redmutex did
    /// not write.
    pub(crate) fn holder(self: &Arc<Self>, key: &str) -> Result<Option<LockInfo>, Error> {
        let cluster = self.config.topology.is_cluster();
        let target = self.config.keys.target(key, cluster)?;
        match self.read_hold(&target)? {
            Some(info) if info.fencing_token == 0 => Err(foreign(key)),
            found => Ok(found),
        }
    }
}
