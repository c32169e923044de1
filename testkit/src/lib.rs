//! What redmutex's tests, unit tests and examples share, as a crate of its
//! own so that each uses it as a dependency (never by including a file by
//! path):
//!
//! - [`server`]: find a Redis server, or start a throw-away `redis-server`
//!   on a free loopback port, with its data outside the working tree;
//! - [`cluster`]: a throw-away Redis Cluster (3 masters, replicas if asked);
//! - [`proxy`]: a TCP proxy with faults or a fixed delay;
//! - [`fork`]: run a closure in a forked child and get its exit code;
//! - [`linear`]: a linearizability checker for recorded histories (the
//!   fault suite's workloads), with the models of a compare-and-set register
//!   and of a set;
//! - [`model`]: the lock protocol as a `stateright` model, checked over
//!   every interleaving by `tests/model.rs` and run step by step against the
//!   real scripts by the library's unit tests (`src/model_vs_redis.rs`).
//!
//! Published with each release of redmutex, at the same version, only so
//! that the packaged crates build their tests and examples: a dev-dependency
//! with no API promise of its own.

pub mod cluster;
pub mod fork;
pub mod linear;
pub mod model;
pub mod proxy;
pub mod server;

pub use server::{
    debug_args, redis_url, server_binary, server_version, temp_dir, ThrowAwayServer, QUIET,
};
