//! A read-write lock's mechanism: the keys of a read or a write hold, and
//! a write hold turned into a read hold.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use crate::protocol::keys::Hold;
use crate::protocol::replies;
use crate::protocol::scripts;
use crate::time;
use crate::token::Token;
use crate::Error;

use super::{acknowledged, Acquisition, RawLock};

/// What a downgrade did: the read hold granted (its acquisition, fencing
/// token and when the request was sent, which its lease counts from), or
/// the write hold found lost (with the reason an operator gave when one
/// broke it).
pub(crate) enum Downgrade {
    Read {
        read: Arc<Acquisition>,
        fence: u64,
        sent: Instant,
    },
    Lost(Option<String>),
}

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

    /// Turns the write hold `write` into a read hold in one script (see
    /// `lua/rw_downgrade.lua`), on the one instance a read-write lock has;
    /// with `min_replicas`, acknowledged as a grant is. A read hold the
    /// call may have left (an error after the script ran) is released.
    pub(crate) fn downgrade(self: &Arc<Self>, write: &Acquisition) -> Result<Downgrade, Error> {
        let (Hold::Write { .. }, Some(name)) = (&write.keys.hold, write.caller_keys.first()) else {
            return Err(Error::InvalidInput(
                "only a write hold downgrades".to_owned(),
            ));
        };
        let read = Arc::new(self.prepare_rw(name, true)?);
        let channel = self.channel_for(&write.keys).map(Cow::into_owned);
        let call = scripts::downgrade(
            &write.keys,
            write.owner().as_str(),
            &read.keys,
            read.owner().as_str(),
            time::millis_ceil(self.config.ttl),
            channel.as_deref().unwrap_or(""),
            time::millis_ceil(self.lock_delay(&write.keys)),
        )
        .ok_or_else(|| Error::InvalidInput("only a write hold downgrades".to_owned()))?;
        let sent = Instant::now();
        let mut outcome = None;
        let ran = self.run_on(0, &mut |c| {
            let reply = call.invoke::<Value>(c)?;
            let parsed = replies::parse_downgrade(&reply)?;
            if parsed.is_ok() {
                acknowledged(&self.config, c)?;
            }
            outcome = Some(parsed);
            Ok(reply)
        });
        match (ran, outcome) {
            (Ok(_), Some(Ok(fence))) => Ok(Downgrade::Read { read, fence, sent }),
            (Ok(_), Some(Err(why))) => Ok(Downgrade::Lost(why)),
            (Ok(reply), None) => Err(replies::unexpected("downgrade", &reply)),
            (Err(e), _) => {
                self.release_quietly(&read);
                Err(e)
            }
        }
    }
}
