//! The lock protocol as `stateright` models: [`single`] for one Redis
//! server (the queue, hand-overs, claims, renewals, restores), [`redlock`]
//! for a majority of independent masters.

pub mod redlock;
pub mod single;
