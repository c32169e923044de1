//! What a guard counts for: in the stats (its kind) and in its locker's
//! registry of holds by thread (taken out when its hold ends).

use super::{Guard, Held};
use crate::stats::recorder::{Kind, Kinded};

/// What the stats count this guard's grant as: its acquisition's kind.
impl Kinded for Guard {
    fn kind(&self) -> Kind {
        self.held
            .as_ref()
            .map_or(Kind::Lock, |h| h.acquisition.kind())
    }
}

/// The hold ended (or this guard was consumed into another one): it no
/// longer counts for its thread.
impl Drop for Held {
    fn drop(&mut self) {
        self.shared.unfile(&self.acquisition, self.filed);
    }
}
