//! Waking waiters when a lock is released: the release listener (its
//! states, its thread's callback and the announcements' format) in
//! [`listener`], and the in-process registry of waiters it wakes in
//! [`waiters`].

pub(crate) mod listener;
pub(crate) mod waiters;
