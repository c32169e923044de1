//! A read-write lock's mechanism: the keys of a read or a write hold.

use std::sync::Arc;

use crate::token::Token;
use crate::Error;

use super::{Acquisition, RawLock};

impl RawLock {
    /// Prepares the acquisition of a read hold (`read`) or the write hold
    /// of the read-write lock `name` (checked already). A read hold gets a
    /// key of its own, named by an id drawn for it.
    pub(crate) fn prepare_rw(&self, name: &str, read: bool) -> Result<Acquisition, Error> {
        let cluster = self.config.topology.is_cluster();
        let id = if read { Some(Token::key_id()?) } else { None };
        let keys = self.config.keys.rw_keys(name, id.as_deref(), cluster);
        Acquisition::new(Arc::from([name.to_owned()]), keys)
    }
}
