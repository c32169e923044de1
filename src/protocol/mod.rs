//! What the crate keeps in Redis and says to it: the key layout
//! ([`keys`]), the Lua scripts (`lua/*.lua`, with their shared helpers in
//! `lua/lib/`) with one typed caller each ([`scripts`]),
//! every reply parsed ([`replies`]), the lock's stored value built and
//! parsed ([`value`]), cluster hash slots ([`slots`]), the holds a listing
//! names ([`named`]), and a caller's commands run inside a script
//! ([`commands`]).

pub(crate) mod commands;
pub(crate) mod keys;
pub(crate) mod named;
pub(crate) mod replies;
pub(crate) mod scripts;
pub(crate) mod slots;
pub(crate) mod value;
