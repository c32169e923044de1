//! The locker a command works with: the server and prefix of its
//! options, with a run's lease settings.

use std::process::ExitCode;
use std::time::Duration;

use redmutex::{r2d2, redis};

use crate::args::Server;
use crate::exit::usage;

/// A locker on the server of `server`, or the exit code of a usage error
/// (said).
pub fn locker(
    server: &Server,
    ttl: Option<Duration>,
    max_hold: Option<Duration>,
    lock_delay: Option<Duration>,
) -> Result<redmutex::Locker, ExitCode> {
    let pool = redmutex::pool(&server.url).map_err(|e| usage(&format!("--url: {e}")))?;
    build(pool, server, ttl, max_hold, lock_delay)
}

fn build(
    pool: r2d2::Pool<redis::Client>,
    server: &Server,
    ttl: Option<Duration>,
    max_hold: Option<Duration>,
    lock_delay: Option<Duration>,
) -> Result<redmutex::Locker, ExitCode> {
    let mut builder = redmutex::Locker::builder(pool);
    if let Some(p) = &server.prefix {
        builder = builder.prefix(p.clone());
    }
    if let Some(ttl) = ttl {
        builder = builder.ttl(ttl);
    }
    if let Some(hold) = max_hold {
        builder = builder.max_hold(hold);
    }
    if let Some(delay) = lock_delay {
        builder = builder.lock_delay(delay);
    }
    builder.build().map_err(|e| usage(&e.to_string()))
}
