//! What the recorder's events are of and why: the kind of a hold (the
//! metrics' `kind` label) and a loss's reason. Its own words for them, as
//! this layer imports nothing of the crate.

/// What a hold is, as the metrics label it (`kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    Permit,
    Read,
    Write,
    Leader,
}

impl Kind {
    /// Every kind, in the order of the variants.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const ALL: [Kind; 5] = [
        Kind::Lock,
        Kind::Permit,
        Kind::Read,
        Kind::Write,
        Kind::Leader,
    ];

    /// The label: `lock`, `permit`, `read`, `write` or `leader`.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Permit => "permit",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Leader => "leader",
        }
    }
}

/// What an event is recorded of (an acquisition, a guard): its [`Kind`],
/// asked by the recorder only with the `metrics` feature, so that without
/// it recording does not even look (the registry of holds by thread,
/// `raw/held.rs`, asks it too).
pub(crate) trait Kinded {
    fn kind(&self) -> Kind;
}

impl Kinded for Kind {
    fn kind(&self) -> Kind {
        *self
    }
}

/// A loss's reason, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    /// The deadline passed without a confirmed renewal.
    Expired,
    /// Redis showed the key gone or someone else's.
    NotOurs,
    /// An operator broke the hold (`Locker::break_lock`).
    Broken,
}
