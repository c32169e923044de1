//! Waking waiters when a lock is released: the release listener (its
//! states and its thread's callback) in [`listener`], on a Redis Cluster
//! its sharded subscriptions in [`shards`], the announcements' format in
//! `announce`, and the in-process registry of waiters they wake in
//! [`waiters`].

mod announce;
pub(crate) mod listener;
pub(crate) mod shards;
pub(crate) mod waiters;
