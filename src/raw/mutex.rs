//! A lock's own mechanism: its keys checked and named, and who holds one.

use std::sync::Arc;

use redis::Value;

use crate::info::LockInfo;
use crate::protocol::keys;
use crate::protocol::replies;
use crate::protocol::scripts;
use crate::quorum::{self, Acquired};
use crate::Error;

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

    /// Who holds `key`, as a majority of instances sees it.
    pub(crate) fn holder(self: &Arc<Self>, key: &str) -> Result<Option<LockInfo>, Error> {
        keys::validate_key(key)?;
        let lock_key = self.config.keys.lock_key(key);
        let this = Arc::clone(self);
        let answers = self.fan.run(self.instances.len(), move |i| {
            let call = scripts::holder(&lock_key);
            let reply = this.run_on(i, &mut |c| Ok(call.invoke::<Value>(c)?))?;
            replies::parse_holder(&reply)
        });
        let hold = keys::Named::Lock(key.to_owned());
        match quorum::decide_holder(answers) {
            Ok(info) => Ok(info.map(|info| replies::named(info, &hold))),
            Err(Acquired::NoQuorum { granted, last }) => Err(self.quorum_error(granted, last)),
            Err(_) => Ok(None),
        }
    }
}
