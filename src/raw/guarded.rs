//! Guarded writes: a caller's commands run on the lock's server, inside
//! one script, only while a granted hold's keys are still its own.

use redis::{ConnectionLike, Pipeline, Value};

use crate::protocol::commands::{self, Commands};
use crate::protocol::keys::KeySpace;
use crate::protocol::scripts;
use crate::protocol::slots;
use crate::token::Token;
use crate::Error;

use super::{acknowledged, Acquisition, RawLock};

impl RawLock {
    /// Runs `pipe`'s commands if every key of `a` is still its own: one
    /// round trip to learn the commands' keys (which also refuses an
    /// unknown command or a wrong number of arguments; one reply, however
    /// many the commands), then the script.
    /// `Ok(None)`: a key was not ours, and nothing ran. With
    /// [`Builder::min_replicas`](crate::Builder::min_replicas), the writes
    /// count once that many replicas have them
    /// ([`Error::NotReplicated`] otherwise: they ran on the master).
    pub(crate) fn run_if_held(
        &self,
        a: &Acquisition,
        pipe: &Pipeline,
    ) -> Result<Option<Vec<Value>>, Error> {
        if self.config.topology.is_redlock() {
            return Err(Error::Unsupported {
                reason: "guarded writes need one server that holds the lock; \
                         in Redlock mode no single master does"
                    .into(),
            });
        }
        let commands = Commands::of(pipe)?;
        let packed = commands.packed();
        let cluster = self.config.topology.is_cluster();
        let owner = a.owner();
        // On a Cluster, redis-rs sends the script again when its reply is
        // late (after each read timeout, up to its retry count): a marker
        // makes any resend run nothing. It outlives the resends: each
        // comes after an I/O timeout.
        let marker = if cluster {
            Some(KeySpace::run_marker(&a.keys.fence, &Token::key_id()?))
        } else {
            None
        };
        // Every resend is sent within the call, at most 16 read timeouts
        // after it started (redis-rs's default retries), and runs as soon
        // as it arrives or the run before it ends: the marker lives that
        // long, and 10 s more for retries that wait (TRYAGAIN and such).
        let marker_ttl = u64::try_from(self.config.io_timeout.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_mul(20)
            .saturating_add(10_000);
        let mut ran = None;
        self.run_on(0, &mut |c: &mut dyn ConnectionLike| {
            let keys = if commands.is_empty() {
                Vec::new()
            } else {
                commands.keys(c, &packed)?
            };
            check_keys(a, &keys, cluster)?;
            let once = marker.as_deref().map(|m| (m, marker_ttl));
            let call = scripts::guarded(&a.keys, owner.as_str(), once, &keys, &packed);
            let reply = call.invoke::<Value>(c)?;
            let outcome = commands::read_run(reply)?;
            if outcome.is_ok() && !keys.is_empty() {
                acknowledged(&self.config, c)?;
            }
            ran = Some(outcome);
            Ok(Value::Nil)
        })?;
        match ran {
            Some(Ok(replies)) => Ok(Some(commands.kept_replies(replies))),
            // A resend found the marker: the first send ran, and its reply
            // was lost to a timeout, as a plain connection's would be.
            Some(Err(3)) => Err(Error::Redis(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the guarded write's reply timed out: its commands ran once, \
                     the request sent again ran nothing",
                )
                .into(),
            )),
            Some(Err(_)) => Ok(None),
            None => Err(crate::protocol::replies::unexpected("guarded", &Value::Nil)),
        }
    }
}

/// The commands' keys may not be the crate's own (the hold's keys, or any
/// key with the reserved marker: counters, queues, other holds) and, on a Cluster, must share the slot
/// of the hold's keys.
fn check_keys(a: &Acquisition, keys: &[Vec<u8>], cluster: bool) -> Result<(), Error> {
    let reserved = crate::protocol::keys::RESERVED.as_bytes();
    for k in keys {
        let ours = a.keys.locks.iter().any(|l| l.as_bytes() == &k[..])
            || k.windows(reserved.len()).any(|w| w == reserved);
        if ours {
            return Err(Error::InvalidInput(format!(
                "key {:?} is one the lock keeps for itself: a guarded write may not touch it",
                String::from_utf8_lossy(k)
            )));
        }
    }
    match a.keys.locks.first() {
        Some(lock) if cluster => commands::check_slot(keys, slots::slot(lock), lock),
        _ => Ok(()),
    }
}
